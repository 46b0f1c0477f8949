"""Bootstrap + merge on the real broker, real Spark, the Derby metastore and a real PostgreSQL:
the merged snapshot equals both the source database's own state (the generator's) and a plain
Python reference merge; changes made during a bootstrap are neither lost nor doubled; every
crash point recovers by retrying the same run; late changes re-merge the stale snapshots."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tests.helpers.orders import (
    BOOTSTRAP_AT,
    Delivered,
    Row,
    bootstrapped,
    duckdb_snapshot,
    history,
    ingest,
    late_update,
    normal,
    orders_table,
    send,
    snapshot,
    three_hours_of_changes,
    truth,
    write_parquet_source,
)
from tests.helpers.tables import at
from tidemark.config import TableConfig
from tidemark.errors import BootstrapError, InjectedFault, MergeError, UnsealedHoursError
from tidemark.faults import SNAPSHOT_POINTS
from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.observe.metrics import emit_metrics
from tidemark.observe.status import render, table_status
from tidemark.settings import Settings
from tidemark.snapshot.bootstrap import run_bootstrap
from tidemark.snapshot.changes import latest_changes, latest_state, state_difference
from tidemark.snapshot.compaction import run_table_compaction
from tidemark.snapshot.formats import is_versioned
from tidemark.snapshot.merge import run_merge
from tidemark.snapshot.merge_plan import preview_merge, stale_snapshot
from tidemark.snapshot.snapshots import SnapshotLog, SnapshotStore, period_of
from tidemark.snapshot.sources import PASSWORD_ENV, USER_ENV, BootstrapSource
from tidemark.state.layout import Layout
from tidemark_dev.generator import order_changes, state_after
from tidemark_dev.pgsource import ORDERS_COLUMNS, ORDERS_DDL, apply_order_changes, replace_table
from tidemark_dev.postgres import POSTGRES_PASSWORD, POSTGRES_USER

pytestmark = pytest.mark.integration


@pytest.fixture(params=["parquet", "delta", "iceberg"])
def snapshot_format(request: pytest.FixtureRequest) -> str:
    """Every snapshot test runs on the three formats of ``<table>_snapshot``."""
    return str(request.param)


def reference_merge(
    base: dict[int, dict[str, Any]],
    delivered: Delivered,
    offsets: dict[str, int],
    start: datetime,
    end: datetime,
) -> list[Row]:
    """Independent plain-Python merge: per key the highest (version, offset, partition) among
    the base (offset -1) and the changes in [start, end) at or after the aligned offsets."""
    best: dict[int, tuple[tuple[int, int, int], dict[str, Any]]] = {
        k: ((int(v["version"]), -1, -1), {"op": "c", **v}) for k, v in base.items()
    }
    for partition, offset, change in delivered:
        when = datetime.fromisoformat(change["updated_at"])
        if offset < offsets.get(str(partition), 0) or not start <= when < end:
            continue
        rank = (int(change["version"]), offset, partition)
        if change["order_id"] not in best or rank > best[change["order_id"]][0]:
            best[change["order_id"]] = (rank, change)
    return sorted(normal(c) for _, c in best.values() if c["op"] != "d")


@pytest.mark.parametrize(
    ("snapshot_format", "envelope", "output_format"),
    [
        *((f, "flat", "parquet") for f in ("parquet", "delta", "iceberg")),
        # the envelope and the increments' format are the increments' business, not the
        # snapshot's: each runs on one snapshot format
        ("delta", "debezium", "parquet"),
        ("iceberg", "flat", "orc"),
    ],
)
def test_files_bootstrap_then_hourly_merges_match_the_source_and_a_reference(
    spark: Any,
    broker: str,
    settings: Settings,
    tmp_path: Path,
    snapshot_format: str,
    envelope: str,
    output_format: str,
) -> None:
    """Every snapshot format; also with the changes in Debezium envelopes (the row in
    after/before, the version as source.lsn, tombstones after deletes), and with the increments
    stored as ORC: the same snapshots."""
    config, settings = orders_table(settings, tmp_path, broker, snapshot_format, envelope, output_format)
    before, source_state = history()
    send(broker, config, before)
    source = BootstrapSource("parquet", str(write_parquet_source(tmp_path / "src", source_state)))
    boot = run_bootstrap(spark, config, settings, "boot-1", source, as_of=BOOTSTRAP_AT, label="base")
    assert boot.rows == len(source_state) and boot.version == 1
    tombstones = sum(c["op"] == "d" for c in before) if envelope == "debezium" else 0
    assert sum(boot.aligned_offsets.values()) == len(before) + tombstones
    assert snapshot(spark, config, "base", settings) == truth(source_state)
    # Retrying the run is a no-op, even with another label asked for.
    assert run_bootstrap(
        spark, config, settings, "boot-1", source, as_of=BOOTSTRAP_AT, label="base"
    ).already_done

    # Increments: two hours of inserts/updates/deletes, some sent twice, some out of order.
    after = order_changes(300, start=at(10), span=at(12) - at(10), existing=source_state, seed=2)
    delivered = send(broker, config, after, duplicates=0.1, reorder=0.1)
    ingest(spark, config, settings, "ingest-1", at(12, 30))
    with pytest.raises(UnsealedHoursError, match="2026-11-22T11"):
        run_merge(spark, config, settings, "merge-11", "2026-11-22T11")  # hour 11 is still open
    delivered += send(
        broker, config, order_changes(4, start=at(12, 20), span=at(12, 30) - at(12, 20), seed=3)
    )
    ingest(spark, config, settings, "ingest-2", at(12, 40))

    base = {**source_state}
    for label in ("2026-11-22T10", "2026-11-22T11"):
        merged = run_merge(spark, config, settings, f"merge-{label}", label)
        end = period_of(config, label).end
        expected = truth(
            state_after([c for c in after if datetime.fromisoformat(c["updated_at"]) < end], base)
        )
        assert snapshot(spark, config, label, settings) == expected
        start = datetime.fromisoformat(boot.increments_from)
        assert expected == reference_merge(base, delivered, boot.aligned_offsets, start, end)
        assert merged.rows == len(expected) and merged.version == 1
    assert merged.base == "2026-11-22T10@v1" and merged.remerged == []
    assert run_merge(spark, config, settings, "merge-2026-11-22T11", "2026-11-22T11").already_done
    with pytest.raises(MergeError, match="bootstrap first"):
        run_merge(spark, config, settings, "merge-early", "2026-11-22T08")


def test_changes_during_the_bootstrap_are_neither_lost_nor_doubled(
    spark: Any,
    broker: str,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    snapshot_format: str,
) -> None:
    config, settings = orders_table(settings, tmp_path, broker)  # alignment: the same for both formats
    before, source_state = history()
    send(broker, config, before)
    csv_dir = tmp_path / "src_csv"
    source = BootstrapSource("csv", str(csv_dir))

    def export(state: dict[int, dict[str, Any]]) -> None:  # the source as CSV with a header
        csv_dir.mkdir(exist_ok=True)
        lines = [",".join(ORDERS_COLUMNS)] + [
            ",".join(str(r[c]) for c in ORDERS_COLUMNS) for r in state.values()
        ]
        (csv_dir / "orders.csv").write_text("\n".join(lines) + "\n")

    export(source_state)
    # The offsets are recorded, then the job dies before reading the source ...
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    monkeypatch.setenv("TIDEMARK_FAIL_AT", "after_alignment")
    with pytest.raises(InjectedFault):
        run_bootstrap(spark, config, settings, "boot-1", source, as_of=BOOTSTRAP_AT)
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    # ... meanwhile the application changes the source, and the CDC stream carries the changes.
    during = order_changes(60, start=at(10), span=at(10, 10) - at(10), existing=source_state, seed=4)
    source_state = state_after(during, source_state)
    export(source_state)
    send(broker, config, during)
    # The retry reads the changed source with the offsets planned first: the overlap is in both.
    boot = run_bootstrap(spark, config, settings, "boot-1", source, as_of=BOOTSTRAP_AT)
    assert boot.label == "2026-11-22T1000" and boot.rows == len(source_state)
    assert sum(boot.aligned_offsets.values()) == len(before)
    later = order_changes(40, start=at(10, 20), span=at(11, 30) - at(10, 20), existing=source_state, seed=5)
    send(broker, config, later)
    ingest(spark, config, settings, "ingest-1", at(11, 40))
    run_merge(spark, config, settings, "merge-10", "2026-11-22T10")
    end = period_of(config, "2026-11-22T10").end
    expected = state_after([c for c in later if datetime.fromisoformat(c["updated_at"]) < end], source_state)
    assert snapshot(spark, config, "2026-11-22T10", settings) == truth(expected)


@pytest.mark.parametrize("point", SNAPSHOT_POINTS[1:])
def test_a_crashed_bootstrap_or_merge_recovers_by_retrying_the_run(
    spark: Any,
    broker: str,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    point: str,
    snapshot_format: str,
) -> None:
    config, settings = orders_table(settings, tmp_path, broker, snapshot_format)
    before, source_state = history()
    send(broker, config, before)
    source = BootstrapSource("parquet", str(write_parquet_source(tmp_path / "src", source_state)))
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
    with pytest.raises(InjectedFault):
        run_bootstrap(spark, config, settings, "boot-1", source, as_of=BOOTSTRAP_AT, label="base")
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    assert (
        run_bootstrap(spark, config, settings, "boot-1", source, as_of=BOOTSTRAP_AT, label="base").version
        == 1
    )
    after = order_changes(80, start=at(10), span=at(11, 30) - at(10), existing=source_state, seed=6)
    send(broker, config, after)
    ingest(spark, config, settings, "ingest-1", at(11, 40))
    monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
    with pytest.raises(InjectedFault):
        run_merge(spark, config, settings, "merge-1", "2026-11-22T10")
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    result = run_merge(spark, config, settings, "merge-1", "2026-11-22T10")
    assert result.version == 1 and not result.already_done
    expected = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(11)], source_state
    )
    assert snapshot(spark, config, "2026-11-22T10", settings) == truth(expected)
    assert snapshot(spark, config, "base", settings) == truth(source_state)
    records = list(SnapshotLog(settings.state_location, config.table).records())
    assert [(r.label, r.version) for r in records] == [("base", 1), ("2026-11-22T10", 1)]
    if snapshot_format == "delta":  # a commit whose record was lost is recovered, not made again
        from deltalake import DeltaTable

        assert [r.table_version for r in records] == [0, 1]
        assert DeltaTable(str(SnapshotStore(spark, config, settings).table_dir)).version() == 1
    if snapshot_format == "iceberg":  # sequence numbers: one Iceberg snapshot per commit, none twice
        table = open_catalog(settings).load_table(identifier(config.snapshot_table))
        assert [r.table_version for r in records] == [1, 2]
        assert [s.sequence_number for s in table.snapshots()] == [1, 2]
        assert {"base", "2026-11-22T10"} <= set(table.metadata.refs)
        # a writer whose base moved fails instead of committing on top (one writer at a time)
        assert table.properties["commit.retry.num-retries"] == "0"
    # tidemark status lists the snapshots, each at its current version
    listed = table_status(config, settings)["snapshots"]
    assert [(s["label"], s["kind"], s["version"], s["base"]) for s in listed] == [
        ("2026-11-22T10", "merge", 1, "base@v1"),
        ("base", "bootstrap", 1, None),
    ]
    assert f"snapshot base v1 (bootstrap): {listed[1]['rows']} rows" in render(table_status(config, settings))
    sent = emit_metrics(config, settings, gauge=lambda name, value: None)  # the newest snapshot's gauges
    prefix = f"tidemark.{config.table}.snapshot."
    assert (
        sent[prefix + "rows"] == listed[0]["rows"] and sent[prefix + "lag_seconds"] == 40 * 60
    )  # 11:40 - 11:00
    assert sent.get(prefix + "table_version") == {"delta": 1, "iceberg": 2}.get(snapshot_format)
    store = SnapshotStore(spark, config, settings)
    assert not store.staging_root.exists() or not any(store.staging_root.iterdir())


def test_a_late_change_makes_its_snapshot_stale_and_the_next_merge_fixes_the_chain(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, snapshot_format: str
) -> None:
    config, settings, source_state, _ = bootstrapped(spark, broker, settings, tmp_path, snapshot_format)
    after = order_changes(100, start=at(10), span=at(12, 20) - at(10), existing=source_state, seed=7)
    send(broker, config, after)
    ingest(spark, config, settings, "ingest-1", at(12, 30))
    run_merge(spark, config, settings, "merge-10", "2026-11-22T10")
    run_merge(spark, config, settings, "merge-11", "2026-11-22T11")
    assert stale_snapshot(config, settings) is None
    # A change of 10:50 arrives after hour 10 was sealed: amend folds it into hour 10 (v2).
    state_at_11 = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(11)], source_state
    )
    victim = max(k for k, r in state_at_11.items() if datetime.fromisoformat(r["updated_at"]) < at(10, 50))
    late = late_update(state_at_11[victim], at(10, 50))
    send(broker, config, [late])
    ingest(spark, config, settings, "ingest-2", at(12, 40))
    assert stale_snapshot(config, settings) == "2026-11-22T11"
    if is_versioned(config):  # the dry run names the anchor the re-merge starts from
        preview = preview_merge(config, settings, "2026-11-22T11")
        assert preview["base"] == "base@v1" and preview["into"].startswith("recompute")
    result = run_merge(spark, config, settings, "remerge-1", "2026-11-22T11")
    fixed = state_after([late], state_at_11)
    if is_versioned(config):
        # Forward only: 11 is recomputed from the bootstrap (hour 10's snapshot is stale) and
        # its difference merged; hour 10's table version keeps the state as merged then.
        assert result.remerged == [] and result.version == 2 and result.base == "base@v1"
        assert snapshot(spark, config, "2026-11-22T10", settings) == truth(state_at_11)
        with pytest.raises(MergeError, match="only move forward"):
            run_merge(spark, config, settings, "remerge-10", "2026-11-22T10")
        log = SnapshotLog(settings.state_location, config.table).live()
        assert log["2026-11-22T11"].changes["updated"] >= 1
    else:
        assert result.remerged == ["2026-11-22T10"] and result.version == 2
        assert snapshot(spark, config, "2026-11-22T10", settings) == truth(fixed)
    expected_11 = state_after(
        [c for c in after if at(11) <= datetime.fromisoformat(c["updated_at"]) < at(12)], fixed
    )
    assert snapshot(spark, config, "2026-11-22T11", settings) == truth(expected_11)
    assert stale_snapshot(config, settings) is None


def test_jdbc_bootstrap_reads_postgres_in_parallel_ranges_without_leaking_the_password(
    spark: Any,
    broker: str,
    postgres: str,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, settings = orders_table(settings, tmp_path, broker)
    before, source_state = history()
    send(broker, config, before)
    loaded = replace_table(settings, "orders_src", ORDERS_DDL, ORDERS_COLUMNS, source_state.values())
    assert loaded == len(source_state)
    source = BootstrapSource(
        "jdbc", postgres, table="orders_src", partition_column="order_id", num_partitions=3
    )
    monkeypatch.setenv(USER_ENV, POSTGRES_USER)
    monkeypatch.setenv(PASSWORD_ENV, "wrong-secret")
    with pytest.raises(BootstrapError) as failure:
        run_bootstrap(spark, config, settings, "boot-bad", source, as_of=BOOTSTRAP_AT, label="pg")
    assert "wrong-secret" not in str(failure.value) and "orders_src" in str(failure.value)
    monkeypatch.setenv(PASSWORD_ENV, POSTGRES_PASSWORD)
    boot = run_bootstrap(spark, config, settings, "boot-pg", source, as_of=BOOTSTRAP_AT, label="pg")
    assert boot.rows == len(source_state) and "3 ranges of order_id" in boot.source
    assert len(list(SnapshotStore(spark, config, settings).partition_dir("pg").glob("*.parquet"))) == 3
    assert snapshot(spark, config, "pg", settings) == truth(source_state)
    # Later changes applied to the database by the application agree with the CDC merge.
    after = order_changes(50, start=at(10), span=at(11, 30) - at(10), existing=source_state, seed=8)
    apply_order_changes(settings, "orders_src", after)
    send(broker, config, after)
    ingest(spark, config, settings, "ingest-1", at(11, 40))
    run_merge(spark, config, settings, "merge-10", "2026-11-22T10")
    in_hour = [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(11)]
    assert snapshot(spark, config, "2026-11-22T10", settings) == truth(state_after(in_hour, source_state))
    state = (settings.state_location.local_path() / config.table / "snapshots").rglob("*.json")
    assert not any("wrong-secret" in p.read_text() for p in state)


def test_latest_state_keeps_the_highest_version_then_offset_and_applies_deletes(spark: Any) -> None:
    base = spark.createDataFrame(
        [(1, 1, "a"), (2, 3, "b"), (3, 1, "c")], "order_id bigint, version bigint, status string"
    )
    changes = spark.createDataFrame(
        [
            ("u", 1, 2, "a-late-offset", 0, 5),
            ("u", 1, 2, "a-early-offset", 0, 3),  # same version: the higher offset wins
            ("u", 2, 2, "b-stale", 0, 6),  # older than the snapshot's version 3: ignored
            ("d", 3, 2, "c-deleted", 1, 1),
            ("c", 4, 1, "d1", 1, 2),
            ("d", 4, 2, "d-deleted", 1, 3),
            ("c", 4, 3, "d-again", 1, 4),  # re-inserted after its delete
            ("d", 5, 1, "never-existed", 1, 5),
        ],
        "op string, order_id bigint, version bigint, status string, _mq_partition int, _mq_offset bigint",
    )
    merged = latest_state(
        base, changes, key=["order_id"], version_field="version", op_field="op", delete_ops=["d"]
    )
    assert merged.columns == ["order_id", "version", "status"]
    assert sorted(tuple(r) for r in merged.collect()) == [
        (1, 2, "a-late-offset"),
        (2, 3, "b"),
        (4, 3, "d-again"),
    ]


def test_a_merge_source_is_the_newest_change_per_key_and_a_difference_names_deletes(spark: Any) -> None:
    changes = spark.createDataFrame(
        [
            ("u", 1, 2, "a-early", 0, 3),
            ("u", 1, 2, "a-late", 0, 5),  # same version: the higher offset wins
            ("c", 4, 1, "d1", 1, 2),
            ("d", 4, 2, "d-deleted", 1, 3),
            ("d", 5, 1, "gone", 1, 5),
        ],
        "op string, order_id bigint, version bigint, status string, _mq_partition int, _mq_offset bigint",
    )
    source = latest_changes(
        changes,
        ["order_id", "version", "status"],
        key=["order_id"],
        version_field="version",
        op_field="op",
        delete_ops=["d"],
    )
    assert source.columns == ["order_id", "version", "status", "_tm_delete"]
    assert sorted(tuple(r) for r in source.collect()) == [
        (1, 2, "a-late", False),
        (4, 2, "d-deleted", True),
        (5, 1, "gone", True),
    ]
    schema = "order_id bigint, version bigint, status string"
    current = spark.createDataFrame([(1, 1, "a"), (2, 1, "b"), (3, 1, None)], schema)
    desired = spark.createDataFrame([(1, 2, "a2"), (3, 1, None), (6, 1, "new")], schema)
    difference = state_difference(desired, current, ["order_id"])
    assert sorted(tuple(r) for r in difference.collect()) == [
        (1, 2, "a2", False),
        (2, 1, "b", True),  # in the current state, not in the desired one
        (6, 1, "new", False),
    ]  # key 3 is equal in both (nulls included): left alone


def merge_13_unpublished(
    spark: Any,
    broker: str,
    config: TableConfig,
    settings: Settings,
    state: dict[int, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Hour 13 merged while publishing its labels fails: the commit stands, logged."""
    send(
        broker,
        config,
        order_changes(20, start=at(13, 30), span=at(14, 30) - at(13, 30), existing=state, seed=8),
    )
    ingest(spark, config, settings, "ingest-2", at(14, 40))
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    monkeypatch.setenv("TIDEMARK_FAIL_AT", "snapshot_views")
    merged = run_merge(spark, config, settings, "merge-13", "2026-11-22T13")
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    assert merged.version == 1 and "its labels were not published" in caplog.text


def test_a_delta_snapshot_keeps_its_newest_labels_and_vacuums_what_only_expired_ones_read(
    spark: Any,
    broker: str,
    settings: Settings,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``cdc.keep_labels``: the newest labels stay readable by name (``VERSION AS OF``; DuckDB
    by version too), an expired label is refused, and, with no grace
    (``output.version_retention: 0s``), the merge's VACUUM deletes the files no kept label reads (its
    own commits name no snapshot: the next merge still finds its head). A registration the
    metastore refuses leaves the commit standing: logged, made good by the retry, which also
    replaces the views an earlier tidemark registered under the table's names."""
    from deltalake import DeltaTable

    config, settings, source_state, _ = bootstrapped(
        spark, broker, settings, tmp_path, "delta", cdc__keep_labels=2, output__version_retention="0s"
    )
    after = three_hours_of_changes(spark, broker, config, settings, source_state)
    root = str(SnapshotStore(spark, config, settings).table_dir)
    labels = ["2026-11-22T10", "2026-11-22T11", "2026-11-22T12"]
    for label in labels:
        run_merge(spark, config, settings, f"merge-{label}", label)
        end = period_of(config, label).end
        expected = state_after(
            [c for c in after if datetime.fromisoformat(c["updated_at"]) < end], source_state
        )
        assert snapshot(spark, config, label, settings) == truth(expected)
    with pytest.raises(MergeError, match="'base' expired"):
        snapshot(spark, config, "base", settings)
    table = DeltaTable(root)
    assert [c["operation"] for c in table.history(2)] == ["VACUUM END", "VACUUM START"]
    live = SnapshotLog(settings.state_location, config.table).live()
    needed = {
        Path(f).name
        for label in labels[1:]
        for f in DeltaTable(root, version=live[label].table_version).file_uris()
    }
    on_disk = {p.name for p in Path(root).glob("*.parquet")}
    assert on_disk == needed  # base's and the first label's replaced files are gone
    # DuckDB reads the same table (its delta extension): the current state, and a kept
    # label by its version
    assert duckdb_snapshot(settings, config) == snapshot(spark, config, labels[-1], settings)
    assert duckdb_snapshot(settings, config, labels[1]) == snapshot(spark, config, labels[1], settings)

    # The names hold an earlier tidemark's views, and the registration fails once: the merge
    # stands, its retry registers the Delta table in their place.
    name = config.snapshot_table
    spark.sql(f"DROP TABLE `{name}`")  # the metastore entry only: the table is external
    assert DeltaTable(root).version() == live[labels[-1]].table_version + 2  # and its VACUUM
    old_view = "SELECT 1 AS order_id, '2026-11-22T12' AS snapshot_dt"  # the label column, as theirs
    spark.sql(f"CREATE VIEW `{name}` AS {old_view}")
    spark.sql(f"CREATE VIEW `{name}_labels` AS {old_view}")
    merge_13_unpublished(spark, broker, config, settings, expected, monkeypatch, caplog)
    assert spark.sql(f"SELECT count(*) FROM `{name}`").first()[0] == 1  # still the old view
    assert run_merge(spark, config, settings, "merge-13", "2026-11-22T13").already_done  # registers it
    described = {r[0]: r[1] for r in spark.sql(f"DESCRIBE TABLE EXTENDED `{name}`").collect()}
    assert described["Provider"] == "delta" and described["Type"] == "EXTERNAL"
    assert not spark.catalog.tableExists(f"{name}_labels")
    spark.sql(f"CREATE VIEW `{name}_labels` AS SELECT 1 AS mine")  # a user's view of that name stays
    assert run_merge(spark, config, settings, "merge-13", "2026-11-22T13").already_done
    assert spark.sql(f"SELECT * FROM `{name}_labels`").first()[0] == 1
    for label in ("2026-11-22T12", "2026-11-22T13"):
        snapshot(spark, config, label, settings)  # by name, VERSION AS OF, the current by name too


def test_an_iceberg_snapshot_tags_its_newest_labels_and_expires_what_only_expired_ones_read(
    spark: Any,
    broker: str,
    settings: Settings,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``cdc.keep_labels`` on Iceberg: the kept labels are tags (read by name), an expired
    label's tag goes and the label is refused, its snapshots expire (no grace:
    ``output.version_retention: 0s``) with the files only they read; a user's own tag stays. Tags a failure left stale are made good by the next merge."""
    config, settings, source_state, _ = bootstrapped(
        spark, broker, settings, tmp_path, "iceberg", cdc__keep_labels=2, output__version_retention="0s"
    )
    catalog = open_catalog(settings)
    table = catalog.load_table(identifier(config.snapshot_table))
    bootstrap_files = {t.file.file_path for t in table.scan().plan_files()}
    current = table.current_snapshot()
    assert current is not None
    table.manage_snapshots().create_tag(current.snapshot_id, "audit-2026").commit()
    after = three_hours_of_changes(spark, broker, config, settings, source_state)
    labels = ["2026-11-22T10", "2026-11-22T11", "2026-11-22T12"]
    for label in labels:
        run_merge(spark, config, settings, f"merge-{label}", label)
    expected = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(13)], source_state
    )
    assert snapshot(spark, config, "2026-11-22T12", settings) == truth(expected)
    # DuckDB reads the same table: the current state, and a label by its tag
    assert duckdb_snapshot(settings, config) == truth(expected)
    assert duckdb_snapshot(settings, config, "2026-11-22T11") == snapshot(
        spark, config, "2026-11-22T11", settings
    )
    table = catalog.load_table(identifier(config.snapshot_table))
    tags = {n for n, r in table.metadata.refs.items() if r.snapshot_ref_type == "tag"}
    assert tags == {"2026-11-22T11", "2026-11-22T12", "audit-2026"}  # the user's tag stays
    with pytest.raises(MergeError, match="'base' expired"):
        snapshot(spark, config, "base", settings)
    # base's and 10's snapshots expired; base's files stay only because the user's tag reads them
    assert sorted(s.sequence_number or 0 for s in table.snapshots()) == [1, 3, 4]
    table.manage_snapshots().remove_tag("audit-2026").commit()

    merge_13_unpublished(spark, broker, config, settings, expected, monkeypatch, caplog)
    table = catalog.load_table(identifier(config.snapshot_table))
    assert "2026-11-22T13" not in table.metadata.refs  # stale until the next merge (or a retry)
    assert run_merge(spark, config, settings, "merge-13", "2026-11-22T13").already_done
    table = catalog.load_table(identifier(config.snapshot_table))
    tags = {n for n, r in table.metadata.refs.items() if r.snapshot_ref_type == "tag"}
    assert tags == {"2026-11-22T12", "2026-11-22T13"}
    assert sorted(s.sequence_number or 0 for s in table.snapshots()) == [4, 5]
    remaining = {
        t.file.file_path
        for s in table.snapshots()
        for t in table.scan(snapshot_id=s.snapshot_id).plan_files()
    }
    gone = bootstrap_files - remaining
    assert gone and not any(Path(f.removeprefix("file:")).exists() for f in gone)  # deleted with base


@pytest.mark.parametrize("snapshot_format", ["delta", "iceberg"])
def test_a_reader_that_planned_on_a_replaced_version_finishes_within_the_grace(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, snapshot_format: str
) -> None:
    """A query planned on ``base`` (its data files listed) before two merges replaced it (one
    label kept) still reads every row of it afterwards: the replaced version waits out
    ``output.version_retention`` of wall-clock time (24 h by default). With the grace passed,
    the next merge deletes what only the replaced versions read."""
    config, settings, source_state, boot = bootstrapped(
        spark, broker, settings, tmp_path, snapshot_format, cdc__keep_labels=1
    )
    planned = version_files(config, settings, snapshot_format)  # the reader's plan, made before the merges
    three_hours_of_changes(spark, broker, config, settings, source_state)
    for label in ("2026-11-22T10", "2026-11-22T11"):
        run_merge(spark, config, settings, f"merge-{label}", label)
    with pytest.raises(MergeError, match="'base' expired"):  # the name follows cdc.keep_labels
        snapshot(spark, config, "base", settings)
    assert sum(pq.read_table(path).num_rows for path in planned) == boot.rows  # the plan reads whole

    short = config.model_copy(
        update={"output": config.output.model_copy(update={"version_retention": timedelta(seconds=1)})}
    )
    time.sleep(1.5)
    run_merge(spark, short, settings, "merge-2026-11-22T12", "2026-11-22T12")
    gone = set(planned) - set(version_files(config, settings, snapshot_format))
    assert gone and not any(Path(path).exists() for path in gone)


def version_files(config: TableConfig, settings: Settings, snapshot_format: str) -> list[str]:
    """The local paths of the data files of the snapshot table's current version."""
    if snapshot_format == "delta":
        from deltalake import DeltaTable

        uris = DeltaTable(str(Layout(settings, config.snapshot_table).table_dir)).file_uris()
    else:
        table = open_catalog(settings).load_table(identifier(config.snapshot_table))
        uris = [task.file.file_path for task in table.scan().plan_files()]
    return sorted(uri.removeprefix("file://").removeprefix("file:") for uri in uris)


@pytest.mark.parametrize("snapshot_format", ["delta", "iceberg"])
def test_a_fragmented_snapshot_is_merged_back_and_its_labels_and_merges_go_on(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, snapshot_format: str
) -> None:
    """The maintenance DAG's compact step on a CDC snapshot that hours of new keys left in more
    and smaller files than its bytes need (each MERGE of inserts only adds a file): one
    maintenance commit (Delta's OPTIMIZE, Iceberg's ``rewrite_data_files``) of the same rows;
    every label reads as before, and the next merge commits on top of it."""
    config, settings, source_state, _ = bootstrapped(
        spark, broker, settings, tmp_path, snapshot_format, compaction__max_files_per_hour=2
    )
    inserts = order_changes(
        60, start=at(10), span=at(13, 30) - at(10), existing=source_state, new_fraction=1.0, seed=3
    )
    send(broker, config, inserts)
    ingest(spark, config, settings, "ingest-1", at(13, 40))
    labels = ["2026-11-22T10", "2026-11-22T11"]
    for label in labels:
        run_merge(spark, config, settings, f"merge-{label}", label)
    fragmented = version_files(config, settings, snapshot_format)
    before = {label: sorted(snapshot(spark, config, label, settings)) for label in ["base", *labels]}
    assert len(fragmented) > 2, fragmented
    assert run_table_compaction(spark, config, settings, "maintain-dry", dry_run=True).snapshot["due"]
    assert version_files(config, settings, snapshot_format) == fragmented  # a dry run rewrites nothing

    done = run_table_compaction(spark, config, settings, "maintain-1").snapshot
    assert (done["files_before"], done["files_after"]) == (len(fragmented), 1)
    assert {label: sorted(snapshot(spark, config, label, settings)) for label in before} == before
    steps = table_status(config, settings)["maintenance"]
    assert steps["compact"]["snapshot_files"] == f"{len(fragmented)} -> 1"
    again = run_table_compaction(spark, config, settings, "maintain-2").snapshot
    assert again["due"] is False and "files_after" not in again  # the retry finds nothing due

    merged = run_merge(spark, config, settings, "merge-2026-11-22T12", "2026-11-22T12")  # on top of it
    assert merged.snapshot.endswith("2026-11-22T12")
    after = sorted(snapshot(spark, config, "2026-11-22T12", settings))
    assert len(after) == len(before[labels[-1]]) + sum(
        1 for c in inserts if at(12) <= datetime.fromisoformat(c["updated_at"]) < at(13)
    )
    assert {label: sorted(snapshot(spark, config, label, settings)) for label in before} == before
