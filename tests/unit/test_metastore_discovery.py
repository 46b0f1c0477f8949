"""How every process of a home finds its ``derby-metastore`` service (``Settings.from_env``):
through the service's pid file while its process lives, never against an explicit setting.
The service itself, started and stopped, is the e2e test's (``test_local_metastore``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidemark.settings import DERBY_METASTORE_SERVICE, Settings, local_metastore_service
from tidemark_dev.local import ON_DEMAND, SERVICES, resolve

pytestmark = pytest.mark.unit

URI = "thrift://127.0.0.1:19999"


def pid_file(home: Path, pid: int, **extra: str) -> None:
    run = home / "run"
    run.mkdir(parents=True, exist_ok=True)
    (run / f"{DERBY_METASTORE_SERVICE}.pid").write_text(json.dumps({"pid": pid, "started": 0, **extra}))


def test_a_running_service_is_found_by_its_pid_file(tmp_path: Path) -> None:
    pid_file(tmp_path, os.getpid(), uri=URI)  # a live process
    assert local_metastore_service(tmp_path) == URI
    assert Settings.from_env({"TIDEMARK_HOME": str(tmp_path)}).hive_metastore_uris == URI


def test_a_dead_service_a_missing_or_bad_record_is_embedded_derby(tmp_path: Path) -> None:
    assert local_metastore_service(tmp_path) == ""  # no pid file
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    pid_file(tmp_path, int(dead.stdout), uri=URI)
    assert local_metastore_service(tmp_path) == ""
    pid_file(tmp_path, os.getpid())  # a record without its address (not this service's)
    assert local_metastore_service(tmp_path) == ""
    (tmp_path / "run" / f"{DERBY_METASTORE_SERVICE}.pid").write_text("{not json")
    assert Settings.from_env({"TIDEMARK_HOME": str(tmp_path)}).hive_metastore_uris == ""


def test_an_explicit_setting_wins_even_an_empty_one(tmp_path: Path) -> None:
    pid_file(tmp_path, os.getpid(), uri=URI)
    production = {"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_HIVE_METASTORE_URIS": "thrift://hms:9083"}
    assert Settings.from_env(production).hive_metastore_uris == "thrift://hms:9083"
    embedded = {"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_HIVE_METASTORE_URIS": ""}
    assert Settings.from_env(embedded).hive_metastore_uris == ""


def test_make_up_starts_the_derby_metastore_before_airflow_and_a_stop_of_all_stops_every_service() -> None:
    started = resolve(["broker", "airflow", "derby-metastore"])
    assert started == ["broker", "derby-metastore", "airflow"]  # Airflow's pool sized for a service
    assert "derby-metastore" in resolve(["all"]) and "metastore" not in resolve(["all"])  # one port
    assert "metastore" in ON_DEMAND
    assert resolve(["all"], every=True) == list(SERVICES)
