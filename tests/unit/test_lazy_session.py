"""The seal's session that starts on first use (``tidemark.lazy_session``) and the launch that
lets a job start no JVM (``jobs.python_launch``): pure parts, with a stand-in for the
session (the seal's real runs are the e2e tests' business: a seal over a metastore service
reports ``spark_started: false`` there)."""

from __future__ import annotations

import shlex
import threading
from typing import Any

import pytest

from tidemark.hourcommit.iceberg import IcebergPublication
from tidemark.jobs import python_launch
from tidemark.lazy_session import (
    LazySession,
    imports_pyspark,
    session_conf_value,
    spark_context,
    spark_started,
)
from tidemark.schema import arrow_schema_of
from tidemark.seal.metastore import HiveClientMetastore
from tidemark.seal.quality import warm_gx
from tidemark.seal.thrift_metastore import ThriftMetastore

pytestmark = pytest.mark.unit

URIS = "spark.hadoop.hive.metastore.uris"


class FakeSession:
    """What the build returns: records calls, answers a conf read."""

    def __init__(self) -> None:
        self.stopped = 0
        self.sparkContext = self
        self.sql_calls: list[str] = []

    def getConf(self) -> dict[str, str]:
        return {URIS: "thrift://started:9083"}

    def sql(self, text: str) -> str:
        self.sql_calls.append(text)
        return f"ran {text}"

    def stop(self) -> None:
        self.stopped += 1


def lazy(builds: list[FakeSession]) -> LazySession:
    def build() -> Any:
        builds.append(FakeSession())
        return builds[-1]

    return LazySession("tidemark-seal-t", build, {URIS: "thrift://planned:9083"})


def test_nothing_starts_until_asked_and_a_job_that_never_asked_stops_nothing() -> None:
    builds: list[FakeSession] = []
    spark = lazy(builds)
    assert not spark.started and not spark_started(spark)
    assert session_conf_value(spark, URIS) == "thrift://planned:9083"  # read without starting
    spark.stop()
    assert builds == [] and spark.start_seconds == 0.0


def test_the_first_question_starts_it_once_and_every_later_one_is_the_sessions() -> None:
    builds: list[FakeSession] = []
    spark = lazy(builds)
    assert spark.sql("SELECT 1") == "ran SELECT 1"
    assert spark.sql("SELECT 2") == "ran SELECT 2"
    assert len(builds) == 1 and builds[0].sql_calls == ["SELECT 1", "SELECT 2"]
    assert spark.started and spark_started(spark)
    assert session_conf_value(spark, URIS) == "thrift://started:9083"  # now the session's own
    spark.stop()
    assert builds[0].stopped == 1


def test_threads_that_ask_at_once_share_one_session() -> None:
    builds: list[FakeSession] = []
    spark = lazy(builds)
    barrier = threading.Barrier(8)

    def ask() -> None:
        barrier.wait()
        spark.sql("SELECT 1")

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len(builds[0].sql_calls) == 8


def test_a_failed_start_is_tried_again_by_the_next_question() -> None:
    attempts: list[int] = []

    def build() -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("Java gateway process exited before sending its port number")
        return FakeSession()

    spark = LazySession("tidemark-seal-t", build, {})
    with pytest.raises(RuntimeError, match="gateway"):
        spark.sql("SELECT 1")
    assert not spark.started
    assert spark.sql("SELECT 1") == "ran SELECT 1" and len(attempts) == 2


def test_a_real_session_is_read_as_it_is() -> None:
    session = FakeSession()
    assert spark_started(session) and session_conf_value(session, URIS) == "thrift://started:9083"


COMMAND = [
    "/venv/bin/spark-submit",
    "--master",
    "local[2]",
    "--name",
    "tidemark-seal-events",
    "--driver-java-options",
    "-XX:SharedArchiveFile=/a b/spark-classes.jsa -Dtidemark.jvm.log=/logs/seal 1.log",
    "--driver-class-path",
    "/jars/postgresql.jar",
    "--conf",
    "spark.jars=/jars/x.jar",
    "/repo/spark_jobs/seal.py",
    "--table",
    "events",
    "--run-id",
    "scheduled__2026-11-22T10:00:00+00:00",
]


def test_a_python_launch_hands_pyspark_every_option_spark_submit_had() -> None:
    launch = python_launch(COMMAND, "/repo/spark_jobs/seal.py", "/venv/bin/python")
    assert launch is not None
    argv, submit_args = launch
    assert argv == [
        "/venv/bin/python",
        "/repo/spark_jobs/seal.py",
        "--table",
        "events",
        "--run-id",
        "scheduled__2026-11-22T10:00:00+00:00",
    ]
    # PySpark's launch_gateway splits PYSPARK_SUBMIT_ARGS with shlex and ends it with the
    # primary resource: the options come back whole, spaces inside included
    assert shlex.split(submit_args) == [*COMMAND[1:11], "pyspark-shell"]


def test_a_driver_on_the_cluster_keeps_spark_submit() -> None:
    command = [*COMMAND[:3], "--deploy-mode", "cluster", *COMMAND[3:]]
    assert python_launch(command, "/repo/spark_jobs/seal.py", "/venv/bin/python") is None
    client = [*COMMAND[:3], "--deploy-mode", "client", *COMMAND[3:]]
    assert python_launch(client, "/repo/spark_jobs/seal.py", "/venv/bin/python") is not None


def test_the_hours_arrow_schema_is_read_without_a_jvm() -> None:
    import pyarrow as pa

    schema = arrow_schema_of(
        [
            ("id", "bigint"),
            ("at", "timestamp"),
            ("local_at", "timestamp_ntz"),
            ("amount", "decimal(12,2)"),
            ("tags", "array<string>"),
            ("attrs", "map<string,bigint>"),
            ("who", "struct<name:string,age:int>"),
        ]
    )
    assert schema == pa.schema(
        [
            ("id", pa.int64()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("local_at", pa.timestamp("us")),
            ("amount", pa.decimal128(12, 2)),
            ("tags", pa.list_(pa.string())),
            ("attrs", pa.map_(pa.string(), pa.int64())),
            ("who", pa.struct([("name", pa.string()), ("age", pa.int32())])),
        ]
    )


def test_code_without_a_handle_starts_the_running_jobs_session_and_only_while_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Iceberg's Java commits reach the JVM through the process's active context: asking for
    it starts the job's lazy session (here a stand-in, which activates no real context)."""
    from pyspark import SparkContext

    # no context active, whatever another test of this worker started
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    builds: list[FakeSession] = []
    spark = lazy(builds)
    assert spark_context() is None and builds == []  # no job running: nothing to start
    with spark.for_this_process():
        spark_context()
        assert len(builds) == 1
    spark_context()
    assert len(builds) == 1


def test_only_warm_ups_marked_as_such_are_taken_to_never_import_pyspark() -> None:
    """The seal imports pyspark before its warm-up threads unless every one is marked: a
    metastore service's Thrift connection and an Iceberg table's pyiceberg load are; the
    Hive client's start, GX's import and any other callable are not."""
    assert not imports_pyspark(ThriftMetastore.connect)
    assert not imports_pyspark(IcebergPublication._warm_up)
    assert imports_pyspark(HiveClientMetastore.connect)
    assert imports_pyspark(warm_gx)
    assert imports_pyspark(lambda: None)
