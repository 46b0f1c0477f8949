"""The upgrade path where the lake lives: the warehouse and the state on S3 (a real
SeaweedFS), the metastore service on PostgreSQL and the standalone cluster.

- Delta snapshots: the orders (CDC) path with ``cdc.snapshot_format: delta`` (delta-rs, then
  delta-spark on the cluster for the forward re-merge: ``cdc.merge_engine: spark``). The bootstrap
  and a merge are killed after their Delta commit and before its record and retried (the
  commit is recovered, not made twice), another merge at a random moment (finished by its
  retry or a run of another id); a late change makes the current version stale and
  the next merge recomputes it forward; each label and the current version are read by name
  through Spark SQL, in a process of its own, and equal the source's state.
- Iceberg snapshots: the same path with ``cdc.snapshot_format: iceberg``, every bootstrap and
  MERGE on the cluster's executors, labels read by their tags.
- The continuous writer, its Structured Streaming checkpoint on S3 too: killed at each point
  of a micro-batch on the cluster and restarted, handed over from and back to the batch dump;
  every record once where readers are pointed, the batches tiling the topic."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from deltalake import DeltaTable  # noqa: TID253

from tests.helpers.chaos import killed_at_random, progress_lines
from tests.helpers.iceberg import snapshots_of
from tests.helpers.jobs import job_env, job_process
from tests.helpers.orders import Row, keyed_once, late_update, normal, send, truth
from tests.helpers.s3cluster import cluster, job, lake, offsets, outcome, registered, s3_metastore, why
from tests.helpers.streams import KILLS, STREAM_ARGS, assert_the_kill_stands, restart_words, tiled
from tests.helpers.tables import at, fresh_table
from tests.helpers.timeouts import HEAVY
from tidemark.config import TableConfig
from tidemark.faults import EXIT_CODE
from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.observe.lineage import job_lineage
from tidemark.observe.metrics import emit_metrics
from tidemark.observe.report import render_report, report_data
from tidemark.observe.status import render, table_status
from tidemark.settings import Settings
from tidemark.snapshot.snapshots import SnapshotLog
from tidemark.snapshot.sources import PASSWORD_ENV, USER_ENV
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark.state.mode import TableWriter
from tidemark.stream.status import StreamStatus, checkpoint_location
from tidemark.tablefs import delta_storage_options as storage_options
from tidemark_dev.generator import create_topic, events, order_changes, produce, state_after
from tidemark_dev.pgsource import ORDERS_COLUMNS, ORDERS_DDL, replace_table
from tidemark_dev.postgres import POSTGRES_PASSWORD, POSTGRES_USER

pytestmark = pytest.mark.e2e
__all__ = ["cluster", "lake", "s3_metastore"]  # module-scoped fixtures of this module's tests

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("TIDEMARK_CHAOS_SEED", "20261125"))


def read_by_name(settings: Settings, *relations: str) -> list[list[Row]]:
    """The orders rows of each of ``relations`` as a Spark SQL user of the metastore service
    reads them (one process of its own for all); fails on a duplicated key."""
    columns = (
        "SELECT order_id, version, customer_id, status, CAST(amount AS STRING) amount, "
        "date_format(updated_at, 'yyyy-MM-dd HH:mm:ss.SSSSSS') || 'Z' updated_at FROM "
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.sql_read", *(columns + r for r in relations)],
        env=job_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, why(done)
    return [
        keyed_once([normal({**r, "updated_at": r["updated_at"].replace(" ", "T")}) for r in rows], relation)
        for relation, rows in zip(relations, json.loads(done.stdout.splitlines()[-1]), strict=True)
    ]


SECRET = {USER_ENV: POSTGRES_USER, PASSWORD_ENV: POSTGRES_PASSWORD}  # the bootstrap's source login


class OrdersOnS3(NamedTuple):
    """An hourly orders table on the lake, its history in the topic and in PostgreSQL."""

    config: TableConfig
    on_cluster: Settings  # jobs on the 2-worker cluster
    settings: Settings  # the same lake, jobs on local[2]
    state: dict[int, dict[str, Any]]  # the source's state: what the bootstrap reads
    boot_args: list[str]  # the bootstrap's arguments: base at 10:00 from PostgreSQL


def orders_on_s3(
    broker: str, postgres: str, cluster: Settings, tmp_path: Path, changes: int, seed: int, **overrides: Any
) -> OrdersOnS3:
    config, on_cluster = fresh_table(
        cluster, tmp_path, template="orders", cdc__snapshot_every="hour", **overrides
    )
    on_cluster = replace(on_cluster, home=tmp_path / "home")
    settings = replace(on_cluster, spark_master="local[2]", executor_env="")
    create_topic(broker, config.source.topic, 2)
    before = order_changes(changes, start=at(9), seed=seed)
    state = state_after(before)
    send(broker, config, before)
    replace_table(settings, config.table, ORDERS_DDL, ORDERS_COLUMNS, state.values())
    boot_args = ["--source-kind", "jdbc", "--source", postgres, "--source-table", config.table]
    boot_args += ["--label", "base", "--as-of", at(10).isoformat()]
    return OrdersOnS3(config, on_cluster, settings, state, boot_args)


def amend_a_late_change(
    broker: str, orders: OrdersOnS3, after: list[dict[str, Any]], jobs: Settings
) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """A change of 10:50 sent after hour 10 was sealed, dumped and amended into hour 10 by
    ``jobs``' dump and seal; returns the state at 11:00 before it, and the change."""
    table = orders.config.table
    state_at_11 = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(11)], orders.state
    )
    victim = max(k for k, r in state_at_11.items() if datetime.fromisoformat(r["updated_at"]) < at(10, 50))
    late = late_update(state_at_11[victim], at(10, 50))
    send(broker, orders.config, [late])
    assert outcome(job(jobs, "dump", table, "ingest-2", "--processing-time", at(12, 40).isoformat()))
    assert outcome(job(jobs, "seal", table, "ingest-2"))["amended"] == ["2026-11-22T10"]
    return state_at_11, late


@HEAVY
def test_a_delta_snapshot_on_s3_survives_kills_remerges_forward_and_is_read_by_name(
    broker: str, postgres: str, cluster: Settings, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    # no grace (output.version_retention 0s): the merge's VACUUM deletes what only a replaced
    # version read at once (the grace itself: tests/integration/test_snapshots.py)
    orders = orders_on_s3(
        broker,
        postgres,
        cluster,
        tmp_path,
        80,
        21,
        cdc__snapshot_format="delta",
        output__version_retention="0s",
    )
    config, on_cluster, settings, source_state, boot_args = orders
    table, snapshots = config.table, config.snapshot_table
    uri = Layout(settings, snapshots).uri(Layout(settings, snapshots).table_dir)
    assert uri.startswith("s3://")

    # killed after the Delta commit, before its record: the retry records it, commits nothing
    killed = job(
        settings, "bootstrap", table, "boot-1", *boot_args, fail_at="after_snapshot_swap", env_extra=SECRET
    )
    assert killed.returncode == EXIT_CODE, why(killed)
    assert DeltaTable(uri, storage_options=storage_options(uri)).version() == 0
    assert not list(SnapshotLog(settings.state_location, table).records())
    boot = outcome(job(on_cluster, "bootstrap", table, "boot-1", *boot_args, env_extra=SECRET))
    assert boot["rows"] == len(source_state)

    after = order_changes(100, start=at(10), span=at(12, 20) - at(10), existing=source_state, seed=22)
    send(broker, config, after)
    assert outcome(job(settings, "dump", table, "ingest-1", "--processing-time", at(12, 30).isoformat()))
    assert outcome(job(settings, "seal", table, "ingest-1"))["sealed"][-2:] == [
        "2026-11-22T10",
        "2026-11-22T11",
    ]
    started = time.monotonic()
    killed = job(
        settings, "merge", table, "merge-10", "--snapshot", "2026-11-22T10", fail_at="after_snapshot_swap"
    )
    assert killed.returncode == EXIT_CODE, why(killed)
    a_merge = time.monotonic() - started  # a merge job up to its Delta commit, here
    assert outcome(job(on_cluster, "merge", table, "merge-10", "--snapshot", "2026-11-22T10"))["version"] == 1
    # the chaos of tests/e2e/test_chaos.py on S3: killed at a random moment, finished by its
    # retry or by a run under another id
    merging = job_process(settings, "merge", table, "merge-11", "--snapshot", "2026-11-22T11")
    # killed after a random log line of those the merge printed up to its crash point
    lines = progress_lines(killed.stderr)
    assert killed_at_random(merging, rng, 0.75 * a_merge, lines), "the merge ended before its kill"
    retry = "merge-11" if rng.random() < 0.5 else "merge-11-retry"
    assert outcome(job(settings, "merge", table, retry, "--snapshot", "2026-11-22T11"))["version"] == 1
    merged_11 = DeltaTable(uri, version=2, storage_options=storage_options(uri)).to_pyarrow_table()
    assert keyed_once([normal(r) for r in merged_11.to_pylist()], "Delta version 2") == truth(
        state_after([c for c in after if datetime.fromisoformat(c["updated_at"]) < at(12)], source_state)
    )

    # a change of 10:50 after hour 10 was sealed: amended into hour 10, so 11 is stale; the
    # next merge of 11 recomputes it from the bootstrap and merges the difference forward
    state_at_11, late = amend_a_late_change(broker, orders, after, settings)
    # the same table now written by delta-spark (cdc.merge_engine: spark) on the cluster's
    # executors, through tidemark's conditional log store on S3: the engine is who writes, the
    # table and its records stay
    conf_file = on_cluster.conf_dir / f"{table}.yaml"
    data = yaml.safe_load(conf_file.read_text())
    data["cdc"]["merge_engine"] = "spark"
    conf_file.write_text(yaml.safe_dump(data, sort_keys=False))
    remerged = outcome(job(on_cluster, "merge", table, "remerge-11", "--snapshot", "2026-11-22T11"))
    assert (remerged["version"], remerged["base"]) == (2, "base@v1")

    fixed = state_after([late], state_at_11)
    expected_11 = truth(
        state_after([c for c in after if at(11) <= datetime.fromisoformat(c["updated_at"]) < at(12)], fixed)
    )
    records = list(SnapshotLog(settings.state_location, table).records())
    assert [(r.ref, r.table_version) for r in records] == [
        ("base@v1", 0),
        ("2026-11-22T10@v1", 1),
        ("2026-11-22T11@v1", 2),
        ("2026-11-22T11@v2", 3),
    ]
    delta = DeltaTable(uri, storage_options=storage_options(uri))
    # the re-merge replaced version 2, which no label reads: the merge's VACUUM deleted its files
    # in two commits of its own (no snapshot record names them)
    assert delta.version() == 5 and [c["operation"] for c in delta.history(2)] == [
        "VACUUM END",
        "VACUUM START",
    ]
    engines = {int(c["version"]): str(c.get("engineInfo")) for c in delta.history()}
    assert "Delta-Lake/4.3.1" in engines[3] and "Delta-Lake" not in engines[2]  # delta-spark, then delta-rs
    # by name, as the Delta table registered in the metastore service: the current version, and
    # each label's version: the bootstrap's, hour 10's as merged (before the late change: Delta
    # history is not rewritten) and hour 11's recomputed one
    assert read_by_name(
        settings,
        f"`{snapshots}`",
        f"`{snapshots}` VERSION AS OF 3",
        f"`{snapshots}` VERSION AS OF 1",
        f"`{snapshots}` VERSION AS OF 0",
    ) == [expected_11, expected_11, truth(state_at_11), truth(source_state)]

    listed = table_status(config, settings)["snapshots"]
    assert sorted((s["label"], s["version"]) for s in listed) == [
        ("2026-11-22T10", 1),
        ("2026-11-22T11", 2),
        ("base", 1),
    ]
    assert "; Delta version 3" in render(table_status(config, settings))
    assert "Delta version 3" in render_report(report_data(config, settings))  # the health page
    gauges = emit_metrics(config, settings, gauge=lambda name, value: None)
    assert gauges[f"tidemark.{table}.snapshot.table_version"] == 3
    lineage = job_lineage("merge", config, settings, "remerge-11")
    assert [d.name for d in lineage.outputs] == [f"default.{snapshots}"]
    assert {d.name for d in lineage.inputs} == {f"default.{table}", f"default.{snapshots}"}
    store = Layout(settings, snapshots).store
    assert not [f for f in store.all_files(snapshots) if "snapshot_dt=" in f]  # staged rows dropped
    assert not (settings.home / "warehouse").exists()  # nothing of the table on the local disk


# The stream's processing time is the wall clock: its events are of recent hours.
NOW = datetime.now(UTC)
HOUR = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)


def stream(settings: Settings, table: str, fail_at: str | None = None) -> subprocess.CompletedProcess[str]:
    return job(settings, "stream", table, "stream-s3", "--until-caught-up", *STREAM_ARGS, fail_at=fail_at)


def readable(settings: Settings, table: str) -> Counter[tuple[int, int]]:
    """Each (MQ partition, offset) where readers and the next seal find it: the files of the
    journal's sealed hours (their sizes checked), the committed batch files still open, and
    the dirty records."""
    layout = Layout(settings, table)
    store = layout.store
    found: Counter[tuple[int, int]] = Counter()
    for key, entry in HourJournal(settings.state_location, table).state().hours.items():
        held = offsets(store, list(entry.files), ("_mq_partition", "_mq_offset"))
        assert sum(held.values()) == entry.rows, (key, entry.rows, sum(held.values()))
        found += held
    committed = {f for c in CommitLog(settings.state_location, table).iter_commits() for f in c.files}
    still_open = [f for f in store.files(layout.relative(layout.open_dir)) if f in committed]
    dirty = store.files(layout.relative(layout.dirty_dir))
    return (
        found
        + offsets(store, still_open, ("_mq_partition", "_mq_offset"))
        + offsets(store, dirty, ("mq_partition", "mq_offset"))
    )


@HEAVY
def test_the_stream_on_s3_and_the_cluster_killed_at_every_point_is_exact_and_hands_back(
    broker: str, cluster: Settings, tmp_path: Path
) -> None:
    config, on_cluster = fresh_table(cluster, tmp_path, late_policy="amend", output__target_file_size="1KiB")
    on_cluster = replace(on_cluster, home=tmp_path / "home")
    settings = replace(on_cluster, spark_master="local[2]", executor_env="")
    table = config.table
    create_topic(broker, config.source.topic, 2)
    assert checkpoint_location(settings, table).startswith("s3a://")
    writer = TableWriter(settings.state_location, table)
    processing = ["--processing-time", NOW.isoformat()]

    # the batch dump: hour H; then handed to the stream, which the batch dump now refuses
    delivered = produce(broker, table, events(60, start=HOUR, partitions=2))
    assert outcome(job(settings, "dump", table, "scheduled__1", *processing))["status"] == "committed"
    writer.switch("stream", by="test", reason="minutes-fresh data", at=NOW.isoformat())
    refused = job(settings, "dump", table, "scheduled__2", *processing)
    assert refused.returncode != 0 and "WriterModeError" in refused.stderr, why(refused)

    # the stream on the cluster, killed at each point of a micro-batch over new records
    expected_at_restart = "a new query"
    for i, point in enumerate(KILLS):
        delivered += produce(broker, table, events(20, start=HOUR + timedelta(hours=1), partitions=2, seed=i))
        commits_before = CommitLog(settings.state_location, table).state().batches
        # on the cluster where its executors did the work the kill interrupts (the batch files,
        # the compaction); the others on local Spark, where a stream costs half
        where = on_cluster if point in ("before_commit_record", "mid_compaction") else settings
        killed = stream(where, table, fail_at=point)
        assert killed.returncode == EXIT_CODE, f"no crash at {point}: {why(killed)}"
        assert expected_at_restart in killed.stderr, (point, expected_at_restart)
        expected_at_restart = restart_words(point)
        assert_the_kill_stands(settings, table, point, commits_before)  # its checkpoint read on S3
        assert max(readable(settings, table).values()) == 1, f"a record twice after a kill at {point}"
        assert tiled(settings, table)
    finished = stream(on_cluster, table)
    result = outcome(finished)
    assert result["status"] == "stopped" and "caught up" in result["reason"], result
    assert "but not recorded as done by Spark" in finished.stderr
    assert readable(settings, table) == Counter((p, o) for p, o, _ in delivered)
    run_ids = [c.run_id for c in CommitLog(settings.state_location, table).iter_commits()]
    assert len(run_ids) == len(set(run_ids))  # each micro-batch committed once
    hour = HOUR.strftime("%Y-%m-%dT%H")
    assert HourJournal(settings.state_location, table).state().hours[hour].published
    assert registered(settings, table)  # the stream's seals registered the hour
    status = StreamStatus(settings.state_location, table).read()
    assert status is not None and status["state"] == "stopped"
    assert "stream: stopped" in render(table_status(config, settings))
    assert "stream: stopped" in render_report(report_data(config, settings))  # the health page

    # handed back to the batch dump: the stream is refused, the dump goes on where it stopped
    writer.switch("batch", by="test", reason="back to hourly", at=NOW.isoformat())
    refused = stream(settings, table)
    assert refused.returncode != 0 and "WriterModeError" in refused.stderr, why(refused)
    delivered += produce(broker, table, events(20, start=HOUR + timedelta(hours=2), partitions=2, seed=99))
    assert outcome(job(on_cluster, "dump", table, "scheduled__3", *processing))["status"] == "committed"
    assert readable(settings, table) == Counter((p, o) for p, o, _ in delivered)
    assert tiled(settings, table) == {p: max(o for q, o, _ in delivered if q == p) + 1 for p in (0, 1)}
    assert not (settings.home / "warehouse").exists()  # nothing of the table on the local disk


@HEAVY
def test_an_iceberg_snapshot_merged_on_the_cluster_on_s3_recovers_remerges_and_is_read_by_tag(
    broker: str, postgres: str, cluster: Settings, tmp_path: Path
) -> None:
    """``cdc.snapshot_format: iceberg``: the bootstrap's overwrite and every MERGE run on the
    cluster's executors, writing the table's files to S3 through s3a; a merge killed after its
    commit is recovered from the snapshot summary, never committed twice; a late change is
    merged forward; labels are tags, read by name. The increments are an Iceberg table too
    (``output.table_format: iceberg``), dumped and sealed on the cluster: each hour one
    snapshot, the late change's amend another."""
    orders = orders_on_s3(
        broker,
        postgres,
        cluster,
        tmp_path,
        60,
        31,
        cdc__snapshot_format="iceberg",
        output__table_format="iceberg",
        output__version_retention="0s",  # no grace: a replaced snapshot expires with the merge
    )
    config, on_cluster, settings, source_state, boot_args = orders
    table, snapshots = config.table, config.snapshot_table

    boot = outcome(job(on_cluster, "bootstrap", table, "boot-1", *boot_args, env_extra=SECRET))
    assert boot["rows"] == len(source_state)

    after = order_changes(80, start=at(10), span=at(12, 20) - at(10), existing=source_state, seed=32)
    send(broker, config, after)
    assert outcome(job(on_cluster, "dump", table, "ingest-1", "--processing-time", at(12, 30).isoformat()))
    assert outcome(job(on_cluster, "seal", table, "ingest-1"))["sealed"][-2:] == [
        "2026-11-22T10",
        "2026-11-22T11",
    ]
    # killed after its Iceberg commit, before its record: the retry records it, commits nothing
    killed = job(
        on_cluster, "merge", table, "merge-11", "--snapshot", "2026-11-22T11", fail_at="after_snapshot_swap"
    )
    assert killed.returncode == EXIT_CODE, why(killed)
    assert not [r for r in SnapshotLog(settings.state_location, table).records() if r.kind == "merge"]
    assert outcome(job(on_cluster, "merge", table, "merge-11", "--snapshot", "2026-11-22T11"))["version"] == 1

    state_at_11, late = amend_a_late_change(broker, orders, after, on_cluster)
    remerged = outcome(job(on_cluster, "merge", table, "remerge-11", "--snapshot", "2026-11-22T11"))
    assert (remerged["version"], remerged["base"]) == (2, "base@v1")
    increments = open_catalog(settings).load_table(identifier(table))
    assert increments.location().startswith("s3a://")
    hours = [(s["tidemark.hour"], s["tidemark.version"]) for s in snapshots_of(settings, table)]
    assert ("2026-11-22T10", "1") in hours and ("2026-11-22T11", "1") in hours
    assert hours[-1] == ("2026-11-22T10", "2") and len(hours) == len(set(hours))  # the amend; none twice

    records = list(SnapshotLog(settings.state_location, table).records())
    assert [(r.ref, r.table_version) for r in records] == [
        ("base@v1", 1),
        ("2026-11-22T11@v1", 2),
        ("2026-11-22T11@v2", 3),
    ]
    iceberg = open_catalog(settings).load_table(identifier(snapshots))
    assert iceberg.location().startswith("s3a://")
    # one snapshot per commit (the killed one recovered, not made again); 11@v1's expired: no
    # label reads it any more
    assert sorted(s.sequence_number or 0 for s in iceberg.snapshots()) == [1, 3]
    assert {n for n, r in iceberg.metadata.refs.items() if r.snapshot_ref_type == "tag"} == {
        "base",
        "2026-11-22T11",
    }
    fixed = state_after([late], state_at_11)
    expected_11 = truth(
        state_after([c for c in after if at(11) <= datetime.fromisoformat(c["updated_at"]) < at(12)], fixed)
    )
    name = f"{settings.iceberg_catalog}.{identifier(snapshots)}"
    assert read_by_name(
        settings, name, f"{name} VERSION AS OF '2026-11-22T11'", f"{name} VERSION AS OF 'base'"
    ) == [expected_11, expected_11, truth(source_state)]
    assert "; Iceberg sequence number 3" in render(table_status(config, settings))
    lineage = job_lineage("merge", config, settings, "remerge-11")  # the Iceberg table by its location
    location = iceberg.location().removeprefix("s3a://")
    assert [(d.namespace, d.name) for d in lineage.outputs] == [
        (f"s3://{location.split('/', 1)[0]}", location.split("/", 1)[1])
    ]
    assert not (settings.home / "warehouse").exists()  # nothing of the table on the local disk
