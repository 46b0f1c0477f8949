"""Running spark_jobs/*.py as their own processes, as spark-submit would: the test's settings
in the environment, optionally a crash point (``TIDEMARK_FAIL_AT``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tidemark.errors import InjectedFault
from tidemark.lazy_session import LazySession
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal

JOBS = Path(__file__).resolve().parents[2] / "spark_jobs"


def job_result(out: str) -> dict[str, Any]:
    """A job's JSON result: the last line of its output that is one (``jobs.in_session``)."""
    result: dict[str, Any] = json.loads(
        [line for line in out.splitlines() if line.startswith('{"table"')][-1]
    )
    return result


def _refused() -> Any:
    raise AssertionError("this job was to run without Spark, and asked for it")


def jvm_free_session(master: str = "local[2]", metastore_uris: str = "") -> Any:
    """What a lazy job (the dump, the seal) gets on ``master`` before anything asks for Spark,
    here one that must never start: a library call with it runs the JVM-free path in this
    process (the dump's read tasks in processes forked from it) or fails the test. With
    ``metastore_uris`` (a metastore service, whose table exists already) a seal registers its
    hours over Thrift, as a seal process of that deployment does."""
    conf = {"spark.master": master}
    if metastore_uris:
        conf["spark.hadoop.hive.metastore.uris"] = metastore_uris
    return LazySession("jvm-free", _refused, conf)


def job_env(settings: Settings, fail_at: str | None = None) -> dict[str, str]:
    """The environment a job of ``settings`` reads them back from (empty values: defaults)."""
    env = {
        **os.environ,
        "TIDEMARK_HOME": str(settings.home),
        "TIDEMARK_CONF_DIR": str(settings.conf_dir),
        "TIDEMARK_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "TIDEMARK_WAREHOUSE": settings.warehouse,
        "TIDEMARK_STATE_DIR": settings.state_uri,
        "TIDEMARK_HIVE_METASTORE_URIS": settings.hive_metastore_uris,
        "TIDEMARK_SPARK_MASTER": settings.spark_master,
        "TIDEMARK_EXECUTOR_ENV": settings.executor_env,
        "TIDEMARK_EXECUTOR_ENV_CACHE": settings.executor_env_cache,
        **settings.iceberg_environment(),
        "PYTHONUNBUFFERED": "1",  # each log line as it happens: the chaos kills count them
    }
    env.pop("TIDEMARK_FAIL_AT", None)
    if fail_at:
        env["TIDEMARK_FAIL_AT"] = fail_at
    return env


def job_process(
    settings: Settings, job: str, table: str, run_id: str, *extra: str, fail_at: str | None = None
) -> subprocess.Popen[str]:
    """``spark_jobs/<job>.py --table T --run-id R ...`` in its own process group (a SIGKILL of
    the group takes its Python workers too)."""
    args = [sys.executable, str(JOBS / f"{job}.py"), "--table", table, "--run-id", run_id, *extra]
    return subprocess.Popen(
        args,
        env=job_env(settings, fail_at),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def run_job_process(
    settings: Settings, job: str, table: str, run_id: str, *extra: str, fail_at: str | None = None
) -> tuple[int, str, str]:
    proc = job_process(settings, job, table, run_id, *extra, fail_at=fail_at)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


_CREATE_METASTORE = """
from tidemark.settings import Settings
from tidemark.spark import build_session

spark = build_session("tidemark-test-metastore", Settings.from_env(), hive=True)
spark.catalog.databaseExists("default")
spark.stop()
"""


def create_metastore(settings: Settings) -> None:
    """Create the embedded Derby metastore of ``settings``' home, in a process of its own, before
    a test kills jobs: the first job to use it creates its schema (seconds, in the seal's
    warm-up thread), and a kill in the middle of that corrupts it for good. A test-topology
    artefact (production runs a metastore service); the kills under test are the jobs'."""
    done = subprocess.run(
        [sys.executable, "-c", _CREATE_METASTORE],
        env=job_env(settings),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def seal_killed_at(spark: Any, config: Any, settings: Settings, monkeypatch: Any, point: str) -> None:
    """A seal failing at crash ``point``, which sealed nothing."""
    monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    with pytest.raises(InjectedFault):
        run_seal(spark, config, settings, "run-1")
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    assert HourJournal(settings.state_location, config.table).state().sealed_through is None
