"""``cdc.merge_engine: spark``: the Delta snapshot's bootstrap and MERGE written by delta-spark
in the jobs' own sessions (``spark_jobs/bootstrap.py``, ``merge.py`` as spark-submit runs them),
crashed after the commit and retried, and read back equal to the source's state by delta-rs;
the default delta-rs engine runs the same checks in test_snapshots.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest
from deltalake import DeltaTable  # noqa: TID253

from tests.helpers.jobs import run_job_process
from tests.helpers.orders import orders_table, send, snapshot, truth, write_parquet_source
from tests.helpers.sql_read import spark_sql
from tests.helpers.tables import at, fresh_table
from tidemark.config import TableConfig
from tidemark.errors import ConfigError, MergeError
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.snapshot.delta_engines import DeltaCommit, SparkDeltaEngine, record_of
from tidemark.snapshot.snapshots import SnapshotLog, SnapshotStore
from tidemark_dev.generator import order_changes, state_after

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _job(
    settings: Settings, job: str, table: str, run_id: str, *args: str, fail_at: str | None = None
) -> Any:
    code, out, err = run_job_process(settings, job, table, run_id, *args, fail_at=fail_at)
    if fail_at is None:
        assert code == 0, err[-3000:]
        return json.loads(out.strip().splitlines()[-1])
    assert code != 0 and fail_at in err, err[-3000:]
    return None


def _bootstrap_and_merge(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, engine: str, *, crash: bool
) -> tuple[TableConfig, Settings, dict[int, dict[str, Any]]]:
    config, settings = orders_table(settings, tmp_path, broker, "delta", cdc__merge_engine=engine)
    # the jobs' own home (embedded Derby is one process's), the test's warehouse and state
    jobs = replace(
        settings, home=tmp_path / "jobs", state_uri=settings.state_uri or str(settings.home / "state")
    )
    before = order_changes(120, start=at(9), seed=1)
    source_state = state_after(before)
    send(broker, config, before)
    source = str(write_parquet_source(tmp_path / "src", source_state))
    boot = ["--source-kind", "parquet", "--source", source, "--label", "base", "--as-of", at(10).isoformat()]
    if crash:  # committed, not recorded: the retry records it and commits nothing again
        _job(jobs, "bootstrap", config.table, "boot-1", *boot, fail_at="after_snapshot_swap")
    assert _job(jobs, "bootstrap", config.table, "boot-1", *boot)["rows"] == len(source_state)

    after = order_changes(200, start=at(10), span=at(11, 30) - at(10), existing=source_state, seed=2)
    send(broker, config, after, duplicates=0.1, reorder=0.1)
    run_dump(spark, config, settings, "ingest-1", at(11, 40))
    run_seal(spark, config, settings, "ingest-1")
    if crash:
        _job(
            jobs,
            "merge",
            config.table,
            "merge-1",
            "--snapshot",
            "2026-11-22T10",
            fail_at="after_snapshot_swap",
        )
    merged = _job(jobs, "merge", config.table, "merge-1", "--snapshot", "2026-11-22T10")
    expected = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(11)], source_state
    )
    assert merged["rows"] == len(expected)
    assert snapshot(spark, config, "2026-11-22T10", settings, by_name=False) == truth(expected)
    assert snapshot(spark, config, "base", settings, by_name=False) == truth(source_state)
    return config, settings, expected


def test_delta_spark_writes_the_snapshot_exactly_once_through_crashes_and_delta_rs_reads_it(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, own, _ = _bootstrap_and_merge(spark, broker, settings, tmp_path, "spark", crash=True)
    records = list(SnapshotLog(own.state_location, config.table).records())
    assert [(r.label, r.kind, r.table_version) for r in records] == [
        ("base", "bootstrap", 0),
        ("2026-11-22T10", "merge", 1),
    ]
    delta = DeltaTable(str(SnapshotStore(spark, config, own).table_dir))
    assert delta.version() == 1  # each crashed job's commit was recovered, none made twice
    assert delta.transaction_version(f"tidemark-snapshot-{config.table}") == 1
    commits = sorted(delta.history(), key=lambda c: int(c["version"]))
    assert all("Delta-Lake/4.3.1" in str(c.get("engineInfo")) for c in commits)  # delta-spark wrote both
    assert [(record_of(c) or {}).get("run_id") for c in commits] == ["boot-1", "merge-1"]
    assert not delta.protocol().reader_features  # what tidemark's delta-rs reads and VACUUM need
    # the Delta table the jobs registered in their metastore, read by name by Spark's own
    # spark-sql shell with the conf `tidemark spark-conf` prints, each label by its version
    jobs = replace(own, home=tmp_path / "jobs", state_uri=own.state_uri or str(own.home / "state"))
    name = config.snapshot_table
    query = "; ".join(
        [f"SELECT count(*) FROM `{name}`"]
        + [f"SELECT count(*) FROM `{name}` VERSION AS OF {r.table_version}" for r in records]
    )
    assert spark_sql(jobs, query, tmp_path) == [[str(records[-1].rows)]] + [[str(r.rows)] for r in records]


def test_on_s3_delta_spark_commits_through_a_log_store_that_refuses_a_second_writer(s3: str) -> None:
    """On S3 (SeaweedFS) the spark engine MERGEs through tidemark's conditional log store
    (jvm/logstore): its commit lands as planned, and a second writer of one commit file is
    refused by the store itself (a conditional PUT), not by a check that a paused writer
    could pass; the first writer's commit stays."""
    uri = f"{s3}/delta-spark-{uuid.uuid4().hex[:8]}/orders_snapshot"
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.delta_s3_writer", uri],
        cwd=ROOT,
        env={**os.environ, "TIDEMARK_JVM_CLASS_ARCHIVE": "off"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    errors = [x for x in done.stderr.splitlines() if "Exception" in x and not x.startswith("\tat ")]
    assert done.returncode == 0, "\n".join(errors[:10]) + done.stderr[-1500:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["log_store"] and result["merged"] == [1, 1], result["store_classes"]
    first, second = result["second_writer"]
    assert first == "written" and "FileAlreadyExistsException" in second, second
    assert json.loads(result["version_2_holds"]) == {"commitInfo": {"writer": "first"}}


def test_the_spark_engine_is_refused_where_it_cannot_be_fenced_and_without_delta(
    settings: Settings, tmp_path: Path
) -> None:
    commit = DeltaCommit(
        "orders",
        "s3://lake/orders_snapshot",
        3,
        "app",
        {},
        (("order_id", "bigint"),),
        ("order_id",),
        "version",
        1,
    )

    class PlainSession:  # a session built without tidemark.delta_spark's conf (refused before use)
        conf: dict[str, str] = {}

    engine = SparkDeltaEngine(spark=cast(Any, PlainSession()))
    with pytest.raises(
        MergeError, match=r"orders: cdc.merge_engine: spark on s3://lake/orders_snapshot needs"
    ):
        engine.merge(cast(Any, None), cast(Any, None), commit, only_newer=True)
    with pytest.raises(ConfigError, match=r"cdc\.merge_engine applies to cdc\.snapshot_format: delta only"):
        fresh_table(settings, tmp_path, template="orders", cdc__merge_engine="spark")
