"""The production topology, natively: the warehouse and the state on S3 (a real SeaweedFS
server), the Hive metastore service on PostgreSQL, and a Spark standalone cluster of a master
and two workers with their own work and local directories, whose executors get the library
and a venv shipped by the jobs (nothing of this checkout's venv is on the workers' paths).
The real jobs (dump, seal, replay, bootstrap, merge, rebuild) run in their own processes, are killed
at protocol points and retried; then each table is read where the metastore service's
database points readers. Nothing is renamed on the store: batch files are written once under
final names; a sealed, amended or rebuilt hour, a late partition and a snapshot version are
new directories the metastore is pointed at."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import pytest
import yaml

from tests.helpers.orders import Row, keyed_once, late_update, normal, send, truth
from tests.helpers.s3cluster import (
    cluster,
    job,
    lake,
    offsets,
    outcome,
    registered,
    rows_at,
    s3_metastore,
    why,
)
from tests.helpers.tables import PROCESSING, START, at, fresh_table
from tests.helpers.timeouts import HEAVY
from tidemark.config import TableConfig
from tidemark.faults import EXIT_CODE, RETENTION_POINTS, SIDE_RETENTION_POINTS
from tidemark.settings import Settings
from tidemark.snapshot.snapshots import SnapshotLog
from tidemark.snapshot.sources import PASSWORD_ENV, USER_ENV
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout, batch_of_file
from tidemark.tablefs import Store
from tidemark_dev.generator import APPS, create_topic, events, order_changes, produce, records, state_after
from tidemark_dev.pgsource import ORDERS_COLUMNS, ORDERS_DDL, replace_table
from tidemark_dev.postgres import POSTGRES_PASSWORD, POSTGRES_USER

pytestmark = pytest.mark.e2e
__all__ = ["cluster", "lake", "s3_metastore"]  # module-scoped fixtures of this module's tests


def s3_table(
    broker: str, base: Settings, tmp_path: Path, **overrides: Any
) -> tuple[TableConfig, Settings, Store]:
    """A fresh events table on the S3 warehouse, its topic (2 MQ partitions), its own home."""
    config, settings = fresh_table(base, tmp_path, **overrides)
    create_topic(broker, config.source.topic, 2)
    return config, replace(settings, home=tmp_path / "home"), Store.of(settings.warehouse)


LATER = ["--processing-time", (PROCESSING + timedelta(hours=1)).isoformat()]


def late_round(broker: str, topic: str, minute: int) -> list[Any]:
    """A late record for hour 10 on each MQ partition (at ``minute`` and the next), then one at
    12:20 on each, which moves every watermark past hour 11's end + commit delay."""
    late = [(0, START + timedelta(minutes=minute)), (1, START + timedelta(minutes=minute + 1))]
    later = [(p, START + timedelta(hours=2, minutes=20)) for p in (0, 1)]
    return produce(broker, topic, records(late + later, prefix="late"))


@HEAVY  # 8-10 min with the cluster's start on a slow sitting of 2 cores: the default 600 s failed it
def test_dump_seal_and_replay_on_s3_on_a_cluster_are_exact_where_the_metastore_points(
    broker: str, cluster: Settings, lake: str, tmp_path: Path
) -> None:
    """The events path of a table partitioned by hour and ``app`` (a data-derived column): a
    partition per app value of each hour version (their switch to a new version together:
    tests/integration/test_metastore_switch.py)."""
    config, settings, store = s3_table(broker, cluster, tmp_path, partitioning__columns=["app"])
    table = config.table
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

    assert job(settings, "dump", table, "run-1", *processing).returncode == 0
    commit = CommitLog(settings.state_location, table).commit(0)
    assert commit is not None
    rows = offsets(store, [f for f in commit.files if "__dirty" not in f], ("_mq_partition", "_mq_offset"))
    dirty = offsets(store, [f for f in commit.files if "__dirty" in f], ("mq_partition", "mq_offset"))
    assert rows + dirty == Counter((p, o) for p, o, _ in first)  # each record once, rows or dirty
    written = store.files(f"{table}/_open")  # by the tasks, under final batch names, per app
    assert dirty and all(batch_of_file(f) == 0 and "/app=" in f for f in written), written
    assert not (settings.home / "warehouse").exists()  # nothing of the table on the local disk

    sealed = job(settings, "seal", table, "seal-1")
    assert sealed.returncode == 0, why(sealed)
    assert json.loads(sealed.stdout.splitlines()[-1])["sealed"] == ["2026-11-22T10"]

    late = late_round(broker, config.source.topic, 5)
    assert job(settings, "dump", table, "run-2", *LATER).returncode == 0
    # the schema fix (event_type may be missing), then a replay of the dirty records: those
    # valid now become rows of hour 11 and late rows of the sealed hour 10
    conf = settings.conf_dir / f"{table}.yaml"
    conf.write_text(conf.read_text().replace("event_type: string not null", "event_type: string"))
    at = [
        "--at",
        (PROCESSING + timedelta(hours=1)).isoformat(),
        "--reason",
        "event_type optional",
        "--by",
        "ops",
    ]
    replayed = outcome(job(settings, "replay", table, "replay-1", *at))
    missing = Counter((p, o) for p, o, m in first if m.dirty_kind == "missing_field")
    assert (replayed["batch_id"], replayed["read"] - replayed["dirty"]) == (2, sum(missing.values()))
    assert missing and not store.files(f"{table}__dirty/batch_id=0")  # retired: kept in _replayed
    result = outcome(job(settings, "seal", table, "seal-2"))
    assert (result["sealed"], result["late_registered"]) == (["2026-11-22T11"], ["2026-11-22T10"])

    journal = {e.hour: e for e in HourJournal(settings.state_location, table).entries()}
    assert sorted(journal) == ["2026-11-22T10", "2026-11-22T11"]
    # where the metastore points readers: the first batch's rows of hours 10 and 11, each
    # once, and the replayed ones of hour 11; the late table the late records (on each MQ
    # partition the one produced before the one of hour 12) and the replayed ones of hour 10
    locations, late_locations = registered(settings, table), registered(settings, config.late_table)
    assert {name.rsplit("/", 1)[0] for name in locations} == {"dt=2026-11-22/hr=10", "dt=2026-11-22/hr=11"}
    for name, location in {**locations, **late_locations}.items():  # each app value its own place
        value = name.rsplit("/", 1)[1]
        assert value in {f"app={a}" for a in APPS} and location.endswith(f"/{value}"), (name, location)
    late_offsets = Counter((p, min(o for q, o, _ in late if q == p)) for p in (0, 1))
    table_rows, late_rows = rows_at(settings, locations), rows_at(settings, late_locations)
    assert table_rows + late_rows == rows + missing + late_offsets
    assert not (table_rows & late_rows) and late_offsets <= late_rows
    still_dirty = offsets(store, store.files(f"{table}__dirty"), ("mq_partition", "mq_offset"))
    assert still_dirty == dirty - missing  # each record in one place
    for name, location in {**locations, **late_locations}.items():
        assert location.startswith(f"s3a://{lake.removeprefix('s3://')}/warehouse/"), (name, location)
        assert "/_versions/v" in location  # a version directory, never the hour's own path
    # the sealed hours' batch files are gone; the hour 12 rows wait in _open
    assert all("hr=12" in f for f in store.files(f"{table}/_open"))
    retention_on_s3(settings, table, store, locations, late_locations)

    # the work ran on both workers, each executor in the venv the jobs shipped, which the
    # "node" (this machine: one cache for both workers) unpacked once, not once per executor
    executors = []
    for index in (1, 2):
        work = cluster.home / f"spark-worker-{index}" / "work"
        executors += list(work.glob("app-*/*/tidemark-python"))
        assert list(work.glob("app-*/*/tidemark-python")), f"worker {index} ran no executor"
        assert list(work.glob("app-*/*/tidemark-lib.zip")), f"worker {index} got no library"
    unpacked = [
        line
        for stderr in cluster.home.glob("spark-worker-*/work/app-*/*/stderr")
        for line in stderr.read_text(errors="replace").splitlines()
        if "tidemark: unpacked the executor venv" in line
    ]
    assert len(executors) > 4 and 1 <= len(unpacked) <= 2, (len(executors), unpacked)
    assert len(list(Path(cluster.executor_env_cache).glob("*/bin/python"))) == 1


def retention_on_s3(
    settings: Settings, table: str, store: Store, locations: dict[str, str], late_locations: dict[str, str]
) -> None:
    """Retention of 3 h as of 14:00 drops hour 10 (of 10 and 11), the job killed at each of
    its steps and retried: hour 10's partitions and (no grace here) its version directories
    go, hour 11 and the late table stay exactly as they were. Then the dirty records' and the
    late table's own retention, killed after each horizon and retried."""
    conf = settings.conf_dir / f"{table}.yaml"
    data = yaml.safe_load(conf.read_text())
    data["retention"] = {"hours": "3h"}
    data.setdefault("output", {})["version_retention"] = "0s"
    conf.write_text(yaml.safe_dump(data, sort_keys=False))
    as_of = ["--as-of", datetime(2026, 11, 22, 14, tzinfo=UTC).isoformat()]
    for point in RETENTION_POINTS:
        assert job(settings, "retention", table, "maintain-1", *as_of, fail_at=point).returncode == EXIT_CODE
    result = outcome(job(settings, "retention", table, "maintain-1", *as_of))
    assert result["first_kept"] == "2026-11-22T11" and result["waiting"] == []
    kept = {name: loc for name, loc in locations.items() if "hr=11" in name}
    assert registered(settings, table) == kept and kept and len(kept) < len(locations)
    assert rows_at(settings, kept) == rows_at(settings, registered(settings, table))
    # (all_files: versions live under the hour's hidden _versions/)
    assert not store.all_files(f"{table}/dt=2026-11-22/hr=10") and store.all_files(
        f"{table}/dt=2026-11-22/hr=11"
    )
    assert registered(settings, f"{table}__late") == late_locations  # the late table is not the hours'

    # retention.dirty and retention.late of 2 h as of 15:30, each job killed after its horizon
    # is recorded and retried: every batch's dirty records (12:00, 13:00 and the replay's
    # 13:00) go, visible and replayed; hour 10's late partitions and their versions go.
    data["retention"] = {"hours": "3h", "dirty": "2h", "late": "2h"}
    conf.write_text(yaml.safe_dump(data, sort_keys=False))
    later = ["--as-of", datetime(2026, 11, 22, 15, 30, tzinfo=UTC).isoformat()]
    assert store.files(f"{table}__dirty") and late_locations
    for point in SIDE_RETENTION_POINTS:
        assert job(settings, "retention", table, "maintain-2", *later, fail_at=point).returncode == EXIT_CODE
    side = outcome(job(settings, "retention", table, "maintain-2", *later))["side"]
    assert (side["dirty_through_batch"], side["late_first_kept"]) == (2, "2026-11-22T13")
    assert side["late_hours_deleted"] == ["2026-11-22T10"]  # (the dirty files went with a killed try)
    assert [f for f in store.all_files(f"{table}__dirty") if "/_open/" not in f] == []
    assert registered(settings, f"{table}__late") == {}
    assert not store.all_files(f"{table}__late/dt=2026-11-22/hr=10")


def snapshot_rows(settings: Settings, location: str) -> list[Row]:
    """A snapshot partition as a reader of the metastore finds it; fails on a duplicated key."""
    store = Store.of(settings.warehouse)
    relative = location.removeprefix(f"s3a://{settings.warehouse.removeprefix('s3://')}/")
    found: list[Row] = []
    for file in store.files(relative):
        with store.fs.open_input_file(store.path(file)) as handle:
            found += [normal(r) for r in pq.read_table(handle).to_pylist()]
    return keyed_once(found, location)


@HEAVY
def test_a_cdc_table_on_s3_amend_merge_and_rebuild_with_kills_are_exact(
    broker: str, postgres: str, cluster: Settings, tmp_path: Path
) -> None:
    """The orders (CDC) path on S3 with the metastore service, its bootstrap, dump, seal and
    merge on the cluster (the kills and their retries on local Spark, where a job costs half:
    the protocol is the same): a JDBC bootstrap from PostgreSQL in two ranges aligned to the
    topic; increments dumped (killed before the commit record, retried: no orphan) and
    sealed; a late change amends hour 10 into version 2, a new directory (the seal killed
    after writing it reuses it; version 1 is collected, retention 0s); the merge, killed
    after pointing the snapshot partition at its version and before recording it, reuses
    that version on retry, reads hour 10's version 2, and collects a replaced version of the
    label; a rebuild of hour 10 from the broker, killed after its switch, writes version 3
    with the same rows. Nothing is renamed, nothing is local."""
    config, on_cluster = fresh_table(
        cluster, tmp_path, template="orders", cdc__snapshot_every="hour", output__version_retention="0s"
    )
    on_cluster = replace(on_cluster, home=tmp_path / "home")
    settings = replace(on_cluster, spark_master="local[2]", executor_env="")
    create_topic(broker, config.source.topic, 2)
    table, store = config.table, Store.of(settings.warehouse)
    prefix = f"s3a://{settings.warehouse.removeprefix('s3://')}/"
    before = order_changes(80, start=at(9), seed=11)
    source_state = state_after(before)
    send(broker, config, before)
    replace_table(settings, table, ORDERS_DDL, ORDERS_COLUMNS, source_state.values())
    secret = {USER_ENV: POSTGRES_USER, PASSWORD_ENV: POSTGRES_PASSWORD}
    source = ["--source-kind", "jdbc", "--source", postgres, "--source-table", table]
    split = ["--partition-column", "order_id", "--num-partitions", "2", "--label", "base"]
    boot = outcome(
        job(
            on_cluster,
            "bootstrap",
            table,
            "boot-1",
            *source,
            *split,
            "--as-of",
            at(10).isoformat(),
            env_extra=secret,
        )
    )
    assert (boot["rows"], sum(boot["aligned_offsets"].values())) == (len(source_state), len(before))

    after = order_changes(60, start=at(10), span=at(11, 30) - at(10), existing=source_state, seed=12)
    send(broker, config, after)
    # killed after its files are written in their final places, before the commit record
    killed = job(
        settings,
        "dump",
        table,
        "ingest-1",
        "--processing-time",
        at(11, 40).isoformat(),
        fail_at="before_commit_record",
    )
    assert killed.returncode == EXIT_CODE, why(killed)
    uncommitted = store.files(f"{table}/_open")
    assert uncommitted and all("part-b0000000000-p" in f for f in uncommitted)
    assert outcome(job(on_cluster, "dump", table, "ingest-1", "--processing-time", at(11, 40).isoformat()))
    commit = CommitLog(settings.state_location, table).commit(0)
    assert commit is not None
    assert sorted(store.files(f"{table}/_open")) == sorted(
        f for f in commit.files if f.startswith(f"{table}/_open/")
    )  # the killed attempt's files are gone or rewritten: no orphan
    sealed = outcome(job(on_cluster, "seal", table, "ingest-1"))
    assert sealed["sealed"] == ["2026-11-22T09", "2026-11-22T10"]
    v1 = HourJournal(settings.state_location, table).state().hours["2026-11-22T10"]

    # a change of 10:30 arrives after hour 10 was sealed: amend writes version 2
    hour_10 = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(11)], source_state
    )
    victim = min(k for k, r in hour_10.items() if datetime.fromisoformat(r["updated_at"]) < at(10, 30))
    late = late_update(hour_10[victim], at(10, 30))
    send(broker, config, [late])
    assert outcome(job(settings, "dump", table, "ingest-2", "--processing-time", at(11, 50).isoformat()))
    killed = job(settings, "seal", table, "ingest-2", fail_at="after_amend_files")
    assert killed.returncode == EXIT_CODE, why(killed)
    amended = outcome(job(settings, "seal", table, "ingest-2"))
    assert amended["amended"] == ["2026-11-22T10"]
    v2 = HourJournal(settings.state_location, table).state().hours["2026-11-22T10"]
    assert (v2.kind.value, v2.version, v2.rows, v2.late) == ("amend", 2, v1.rows + 1, 1)
    assert amended["versions_deleted"] == [str(Path(v1.files[0]).parent)] and not store.files(
        str(Path(v1.files[0]).parent)
    )
    assert registered(settings, table)["dt=2026-11-22/hr=10"].endswith("/_versions/v0002-b0000000001")

    label = "2026-11-22T10"
    killed = job(settings, "merge", table, "merge-1", "--snapshot", label, fail_at="after_snapshot_swap")
    assert killed.returncode == EXIT_CODE, why(killed)
    pointed = registered(settings, config.snapshot_table)[f"snapshot_dt={label}"]
    # a version an earlier merge of the label left (replaced, unreferenced): collected by the
    # next merge of the label, with the retention at 0s
    version_files = store.files(pointed.removeprefix(prefix))
    replaced = f"{config.snapshot_table}/snapshot_dt={label}/_s0123456789ab"
    store.fs.copy_file(store.path(version_files[0]), store.path(f"{replaced}/part-00000.parquet"))
    merged = outcome(job(on_cluster, "merge", table, "merge-1", "--snapshot", label))
    expected = truth(state_after([late], hour_10))
    locations = registered(settings, config.snapshot_table)
    assert locations[f"snapshot_dt={label}"] == pointed  # the killed attempt's version, reused
    assert (merged["version"], merged["rows"]) == (1, len(expected))
    assert snapshot_rows(settings, locations["snapshot_dt=base"]) == truth(source_state)
    assert snapshot_rows(settings, pointed) == expected  # the late change, read from hour 10's v2
    assert not store.all_files(replaced) and store.files(pointed.removeprefix(prefix)) == version_files
    records = {r.ref: r for r in SnapshotLog(settings.state_location, table).records()}
    assert sorted(records) == ["2026-11-22T10@v1", "base@v1"]
    assert all(r.location and "/_versions/s" in r.location for r in records.values())

    # a rebuild of hour 10 from the broker, killed after pointing the partition at version 3
    # and before its journal entry; its retry reuses the directory: the same rows as version 2
    short_lease = {"TIDEMARK_LOCK_LEASE_S": "2"}
    killed = job(
        settings,
        "rebuild",
        table,
        "rebuild-1",
        "--hours",
        "2026-11-22T10",
        fail_at="after_swap",
        env_extra=short_lease,
    )
    assert killed.returncode == EXIT_CODE, why(killed)
    pointed_v3 = registered(settings, table)["dt=2026-11-22/hr=10"]
    assert pointed_v3.endswith("/_versions/v0003-b0000000001")
    # a seal before the retry (the killed rebuild's lease expired): the journal still names v2,
    # but the partition points at v3, so v3 is kept (retention 0s)
    time.sleep(3)
    assert outcome(job(settings, "seal", table, "seal-between"))["versions_deleted"] == []
    assert store.files(pointed_v3.removeprefix(prefix))
    rebuilt = outcome(job(settings, "rebuild", table, "rebuild-1", "--hours", "2026-11-22T10"))
    assert [(h["status"], h["version"], h["rows"]) for h in rebuilt["hours"]] == [("rebuilt", 3, v2.rows)]
    v3 = HourJournal(settings.state_location, table).state().hours["2026-11-22T10"]
    assert (v3.kind.value, v3.version) == ("rebuild", 3)
    columns = ("_mq_partition", "_mq_offset")
    assert offsets(store, list(v3.files), columns) == offsets(store, list(v2.files), columns)
    assert registered(settings, table)["dt=2026-11-22/hr=10"].endswith("/_versions/v0003-b0000000001")
    layout = Layout(settings, table)
    assert not [f for f in store.all_files(layout.relative(layout.staging_root)) if "/rebuild-" in f]
    compaction_on_s3(broker, config, settings, late, v3)
    assert not (settings.home / "warehouse").exists()  # nothing of the table on the local disk


def compaction_on_s3(broker: str, config: TableConfig, settings: Settings, late: Any, v3: Any) -> None:
    """Another late change amends hour 10 into version 4: on an object store an amend writes the
    whole hour again as one version (no rename to move a file in), so the compaction finds
    nothing to merge back and changes nothing."""
    table = config.table
    send(broker, config, [late_update(late, at(10, 40))])
    assert outcome(job(settings, "dump", table, "ingest-3", "--processing-time", at(11, 55).isoformat()))
    assert outcome(job(settings, "seal", table, "ingest-3"))["amended"] == ["2026-11-22T10"]
    v4 = HourJournal(settings.state_location, table).state().hours["2026-11-22T10"]
    assert (v4.version, len(v4.files), v4.rows) == (4, 1, v3.rows + 1)
    result = outcome(job(settings, "compact", table, "maintain-1"))
    assert (result["compacted"], result["considered"]) == ([], 0)
    assert HourJournal(settings.state_location, table).state().hours["2026-11-22T10"] == v4
