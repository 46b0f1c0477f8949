"""The local deployment's metastore (`make up`'s ``derby-metastore``): a Hive metastore
service over the home's own Derby database. While it runs, every process of the home finds
it (no variable set) and a seal registers its hours over Thrift without starting a JVM; once
it stops, the jobs open the same database embedded and see the same table and partitions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import at, fresh_table
from tidemark.ingest.dump import run_dump
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark_dev.derby_metastore import DerbyMetastoreService
from tidemark_dev.generator import create_topic, produce, records
from tidemark_dev.net import free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
def home(settings: Settings, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A home of its own, its environment without TIDEMARK_HIVE_METASTORE_URIS (the jobs find
    the service, or its database, by themselves)."""
    env = {k: v for k, v in os.environ.items() if k != "TIDEMARK_HIVE_METASTORE_URIS"}
    env.update(
        {
            "TIDEMARK_HOME": str(tmp_path / "home"),
            "TIDEMARK_CONF_DIR": str(tmp_path / "conf"),
            "TIDEMARK_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "TIDEMARK_METASTORE_PORT": str(free_port()),
        }
    )
    service = DerbyMetastoreService(Settings.from_env(env))
    try:
        yield env
    finally:
        service.stop()


def tidemark(env: dict[str, str], *args: str) -> str:
    """The CLI in ``env``; its output (stdout and stderr), a failure shown whole."""
    command = [str(Path(sys.executable).parent / "tidemark"), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=420, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    return out


def result(out: str) -> dict[str, Any]:
    return json.loads([line for line in out.splitlines() if line.startswith('{"table"')][-1])


def test_one_database_with_or_without_its_service_and_no_jvm_for_a_seal_while_it_runs(
    spark: Any, broker: str, home: dict[str, str], tmp_path: Path
) -> None:
    own = Settings.from_env(home)
    assert own.hive_metastore_uris == ""  # nothing runs: embedded Derby
    service = DerbyMetastoreService(own)
    service.start()
    own = Settings.from_env(home)
    assert own.hive_metastore_uris == service.address()  # found through its pid file

    config, own = fresh_table(own, tmp_path)
    create_topic(broker, config.source.topic, 2)
    hour_10 = [(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 15)]
    produce(broker, config.source.topic, records([*hour_10, (0, at(11, 50)), (1, at(11, 45))]))
    run_dump(spark, config, own, "run-1", at(12))  # the dump does not use the metastore
    first = tidemark(home, "seal", "--table", config.table, "--run-id", "seal-1")
    assert result(first)["sealed"] == ["2026-11-22T10"]
    assert result(first)["spark_started"] is True  # the table's creation, once

    more = [(0, at(11, 5)), (1, at(11, 20)), (0, at(12, 50)), (1, at(12, 45))]
    produce(broker, config.source.topic, records(more, prefix="s"))
    run_dump(spark, config, own, "run-2", at(13))
    second = tidemark(home, "seal", "--table", config.table, "--run-id", "seal-2")
    assert result(second)["sealed"] == ["2026-11-22T11"]
    assert result(second)["spark_started"] is False, second[-3000:]
    assert f"{config.table}: registering partitions over the metastore service's Thrift API" in second

    # the service stopped, its database is the jobs' own again: the same table, both hours
    assert service.stop()
    assert Settings.from_env(home).hive_metastore_uris == ""
    verified = tidemark(home, "verify", "--table", config.table)  # through the Hive client: Derby
    assert result(verified)["ok"] is True, verified[-3000:]
    print(verified[-3000:])
    journal = HourJournal(own.state_dir, config.table).state().hours
    assert journal["2026-11-22T10"].rows == 8 and journal["2026-11-22T11"].rows == 4
