"""The production topology, natively: the warehouse and the state on S3 (a real SeaweedFS
server), the Hive metastore service on PostgreSQL, and a Spark standalone cluster of a master
and two workers with their own work and local directories, whose executors get the library
and a venv shipped by the jobs (nothing of this checkout's venv is on the workers' paths).
The real dump and seal jobs run in their own processes, are killed at protocol points and
retried, then the tables are read back through the metastore by another Spark process. Nothing is renamed on
the store: batch files are written once under final names, a sealed hour and a late
partition are new directories the metastore is pointed at."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.helpers.metastore import metastore_service
from tests.helpers.net import free_port_block
from tests.helpers.tables import PROCESSING, START, fresh_table
from tidemark.faults import EXIT_CODE
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.tablefs import Store
from tidemark_dev.cluster import SparkMasterService, SparkWorkerService, master_url
from tidemark_dev.generator import create_topic, events, produce, records

pytestmark = pytest.mark.e2e

JOBS = Path(__file__).resolve().parents[2] / "spark_jobs"
VERIFY = """
import json, sys
from tidemark.settings import Settings
from tidemark.spark import build_session
spark = build_session("verify-object-store", Settings.from_env())
out = {}
for table in sys.argv[1:]:
    rows = spark.sql(f"SELECT _mq_partition, _mq_offset FROM `{table}`").collect()
    locations = {}
    for (name,) in spark.sql(f"SHOW PARTITIONS `{table}`").collect():
        spec = ", ".join(f"{k}='{v}'" for k, v in (part.split("=", 1) for part in name.split("/")))
        described = spark.sql(f"DESCRIBE FORMATTED `{table}` PARTITION ({spec})").collect()
        locations[name] = [r.data_type for r in described if r.col_name == "Location"][0]
    out[table] = {"rows": [[r[0], r[1]] for r in rows], "locations": locations}
print("VERIFY " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def lake(s3: str) -> str:
    """A fresh prefix of the test bucket."""
    return f"{s3}/{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def s3_metastore(
    settings: Settings, postgres: str, lake: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """The metastore service for a warehouse on S3 (s3a on its class path, keys from the
    environment); yields settings pointing at both."""
    with metastore_service(
        replace(settings, warehouse=f"{lake}/warehouse", state_uri=f"{lake}/state")
    ) as own:
        yield own


@pytest.fixture(scope="module")
def cluster(s3_metastore: Settings) -> Iterator[Settings]:
    """A standalone master and two workers; settings whose jobs run on them and ship
    ``make executor-env``'s archive."""
    archive = Path(s3_metastore.python).parent.parent / "share" / "tidemark" / "executor-env.tar.gz"
    assert archive.is_file(), "run `make executor-env` (make test does)"
    own = replace(s3_metastore, spark_port=free_port_block(6))
    nodes = [SparkMasterService(own), *(SparkWorkerService(own, i) for i in (1, 2))]
    try:
        for node in nodes:
            node.start()
        yield replace(own, spark_master=master_url(own), executor_env=str(archive))
    finally:
        for node in reversed(nodes):
            node.stop()


def environment(settings: Settings) -> dict[str, str]:
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
    }
    env.pop("TIDEMARK_FAIL_AT", None)
    return env


def job(
    settings: Settings, name: str, table: str, run_id: str, *extra: str, fail_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = environment(settings)
    if fail_at:
        env["TIDEMARK_FAIL_AT"] = fail_at
    args = [sys.executable, str(JOBS / f"{name}.py"), "--table", table, "--run-id", run_id, *extra]
    started = time.monotonic()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=400, check=False)
    print(f"{name} {run_id} {fail_at or ''}: {time.monotonic() - started:.1f} s")
    return done


def why(done: subprocess.CompletedProcess[str]) -> str:
    """A failed job's error lines (not its stack frames) and the end of its log."""
    errors = [x for x in done.stderr.splitlines() if ("Error" in x or "Exception" in x) and "\tat " not in x]
    return "\n".join(errors[:15]) + "\n...\n" + done.stderr[-1500:]


def read_back(settings: Settings, *tables: str) -> dict[str, Any]:
    """The tables as another Spark process sees them through the metastore."""
    env = environment(settings)
    env["TIDEMARK_SPARK_MASTER"] = "local[2]"  # a reader with s3a on its own class path, as a user's Spark
    done = subprocess.run(
        [sys.executable, "-c", VERIFY, *tables],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, why(done)
    line = next(x for x in done.stdout.splitlines() if x.startswith("VERIFY "))
    return dict(json.loads(line.removeprefix("VERIFY ")))


def offsets(store: Store, files: list[str], columns: tuple[str, str]) -> Counter[tuple[int, int]]:
    found: Counter[tuple[int, int]] = Counter()
    for relative in files:
        with store.fs.open_input_file(store.path(relative)) as handle:
            t = pq.read_table(handle, columns=list(columns))
        found.update(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))
    return found


def test_dump_and_seal_on_s3_with_kills_are_exact_and_read_through_the_metastore(
    broker: str, cluster: Settings, lake: str, tmp_path: Path
) -> None:
    config, settings = fresh_table(cluster, tmp_path)
    settings = replace(settings, home=tmp_path / "home")
    table = config.table
    store = Store.of(settings.warehouse)
    create_topic(broker, config.source.topic, 2)
    first = produce(
        broker,
        config.source.topic,
        events(
            240,
            start=START + timedelta(minutes=5),
            partitions=2,
            span=timedelta(minutes=100),
            dirty_fraction=0.03,
        ),
    )
    processing = ["--processing-time", PROCESSING.isoformat()]

    # killed after its files are written in their final places, before the commit record
    killed = job(settings, "dump", table, "run-1", *processing, fail_at="before_commit_record")
    assert killed.returncode == EXIT_CODE, why(killed)
    uncommitted = store.files(f"{table}/_open")
    assert uncommitted and all("part-b0000000000-p" in f for f in uncommitted)
    retried = job(settings, "dump", table, "run-1", *processing)
    assert retried.returncode == 0, why(retried)
    commit = CommitLog(settings.state_location, table).commit(0)
    assert commit is not None
    rows = offsets(store, [f for f in commit.files if "__dirty" not in f], ("_mq_partition", "_mq_offset"))
    dirty = offsets(store, [f for f in commit.files if "__dirty" in f], ("mq_partition", "mq_offset"))
    assert rows + dirty == Counter((p, o) for p, o, _ in first)  # each record once, rows or dirty
    assert dirty and sorted(store.files(f"{table}/_open")) == sorted(
        f for f in commit.files if f.startswith(f"{table}/_open/")
    )  # the killed attempt's files are gone or rewritten: no orphan
    assert not (settings.home / "warehouse").exists()  # nothing of the table on the local disk

    # killed after the partition is registered, before _SUCCESS and the journal entry
    crashed = job(settings, "seal", table, "seal-1", fail_at="after_registration")
    assert crashed.returncode == EXIT_CODE, why(crashed)
    sealed = job(settings, "seal", table, "seal-1")
    assert sealed.returncode == 0, why(sealed)
    assert json.loads(sealed.stdout.splitlines()[-1])["sealed"] == ["2026-11-22T10"]

    # late rows for the sealed hour 10, and records that move the watermark past hour 11
    late = produce(
        broker,
        config.source.topic,
        records(
            [(0, START + timedelta(minutes=5)), (1, START + timedelta(minutes=7))]
            + [(p, START + timedelta(hours=2, minutes=20)) for p in (0, 1)],
            prefix="late",
        ),
    )
    later = ["--processing-time", (PROCESSING + timedelta(hours=1)).isoformat()]
    second = job(settings, "dump", table, "run-2", *later)
    assert second.returncode == 0, why(second)
    resealed = job(settings, "seal", table, "seal-2")
    assert resealed.returncode == 0, why(resealed)
    result = json.loads(resealed.stdout.splitlines()[-1])
    assert (result["sealed"], result["late_registered"]) == (["2026-11-22T11"], ["2026-11-22T10"])

    journal = {e.hour: e for e in HourJournal(settings.state_location, table).entries()}
    assert sorted(journal) == ["2026-11-22T10", "2026-11-22T11"]
    seen = read_back(settings, table, config.late_table)
    # the first batch's rows (hours 10 and 11), each once, through the metastore's locations
    assert Counter((p, o) for p, o in seen[table]["rows"]) == rows
    # on each MQ partition the late record was produced before the one of hour 12
    late_offsets = Counter((p, min(o for q, o, _ in late if q == p)) for p in (0, 1))
    assert Counter((p, o) for p, o in seen[config.late_table]["rows"]) == late_offsets
    for name, location in {**seen[table]["locations"], **seen[config.late_table]["locations"]}.items():
        assert location.startswith(f"s3a://{lake.removeprefix('s3://')}/warehouse/"), (name, location)
        assert "/_v" in location  # a version directory, never the hour's own path
    # the sealed hours' batch files are gone; the hour 12 rows wait in _open
    assert all("hr=12" in f for f in store.files(f"{table}/_open"))
    # the work ran on both workers, each executor in the venv the jobs shipped
    for index in (1, 2):
        work = cluster.home / f"spark-worker-{index}" / "work"
        assert list(work.glob("app-*/*/tidemark_env/bin/python")), f"worker {index} ran no executor"
        assert list(work.glob("app-*/*/tidemark-lib.zip")), f"worker {index} got no library"
