"""Pure parts of bootstrap and merge: source validation and masking, snapshot periods, which
snapshot a merge starts from, which hours it needs, and when a merged snapshot is stale."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.helpers.records import journal_entry
from tests.helpers.records import snapshot_record as record
from tidemark.config import TableConfig, load_table_file
from tidemark.errors import BootstrapError, MergeError, UnsealedHoursError
from tidemark.jobs import job_parser
from tidemark.snapshot.delta_engines import record_of, user_metadata
from tidemark.snapshot.merge_plan import MergePlan, is_stale, plan_merge, plan_versioned_merge
from tidemark.snapshot.snapshots import SnapshotRecord, base_for, format_name, is_versioned, period_of
from tidemark.snapshot.sources import (
    BootstrapSource,
    add_source_arguments,
    credentials,
    jdbc_options,
    source_from_arguments,
)
from tidemark.snapshot.spark_merge import merge_sql
from tidemark.snapshot.versioned import newest_labels, readable_since
from tidemark.state.journal import JournalEntry, JournalState

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def orders() -> TableConfig:
    return load_table_file(ROOT / "conf" / "tables" / "orders.yaml")


def entry(hour: str, kind: str = "seal", version: int = 1) -> JournalEntry:
    return journal_entry(hour, kind, version, table="orders")


def test_a_source_needs_a_kind_a_location_and_one_of_table_or_query() -> None:
    with pytest.raises(BootstrapError, match="kind 'oracle'"):
        BootstrapSource("oracle", "x")
    with pytest.raises(BootstrapError, match="exactly one of"):
        BootstrapSource("jdbc", "jdbc:postgresql://h/db")
    with pytest.raises(BootstrapError, match="exactly one of"):
        BootstrapSource("jdbc", "jdbc:postgresql://h/db", table="t", query="select 1")
    with pytest.raises(BootstrapError, match="num_partitions"):
        BootstrapSource("parquet", "/data", num_partitions=0)


def test_passwords_never_reach_descriptions_and_travel_only_as_reader_options() -> None:
    source = BootstrapSource(
        "jdbc",
        "jdbc:postgresql://h/db?user=u&password=hunter2&ssl=true",
        query="SELECT * FROM orders WHERE region = 'eu'",
        partition_column="order_id",
        lower_bound="1",
        upper_bound="1000",
        num_partitions=8,
    )
    assert "hunter2" not in source.describe() and "password=***" in source.describe()
    secret = credentials({"TIDEMARK_SOURCE_USER": "reader", "TIDEMARK_SOURCE_PASSWORD": "s3"})
    options = jdbc_options(source, secret)
    assert options["dbtable"] == "(SELECT * FROM orders WHERE region = 'eu') tidemark_source"
    assert (options["partitionColumn"], options["numPartitions"], options["password"]) == (
        "order_id",
        "8",
        "s3",
    )
    with pytest.raises(BootstrapError, match="bounds"):
        jdbc_options(replace(source, upper_bound=""), secret)
    assert credentials({}) == {}


def test_periods_are_local_days_or_hours(orders: TableConfig) -> None:
    day = period_of(orders, "2026-11-22")
    assert (day.start, day.end) == (datetime(2026, 11, 22, tzinfo=UTC), datetime(2026, 11, 23, tzinfo=UTC))
    hour = period_of(orders, "2026-11-22T13")
    assert hour.end - hour.start == datetime(2026, 1, 1, 1) - datetime(2026, 1, 1)
    paris = orders.model_copy(
        update={"event_time": orders.event_time.model_copy(update={"time_zone": "Europe/Paris"})}
    )
    short = period_of(paris, "2026-03-29")  # the spring-forward day has 23 hours
    assert (short.end - short.start).total_seconds() == 23 * 3600
    with pytest.raises(MergeError, match="expected a day"):
        period_of(orders, "yesterday")


def test_a_merge_starts_from_the_newest_state_before_its_end_never_its_own(orders: TableConfig) -> None:
    boot = record("2026-11-22T0800", "bootstrap", "2026-11-22T08:00:00+00:00")
    day_22 = record("2026-11-22", "merge", "2026-11-23T00:00:00+00:00")
    rebooted = record("2026-11-23T0600", "bootstrap", "2026-11-23T06:00:00+00:00")
    live = {r.label: r for r in (boot, day_22, rebooted)}
    assert base_for(live, period_of(orders, "2026-11-22")) == boot  # a re-merge of 22 uses the bootstrap
    assert base_for(live, period_of(orders, "2026-11-23")) == rebooted  # the newer full load wins
    assert base_for(live, period_of(orders, "2026-11-21")) is None


def test_unsealed_and_quarantined_hours_are_named_and_empty_final_hours_read_as_version_0(
    orders: TableConfig,
) -> None:
    boot = record(
        "base", "bootstrap", "2026-11-22T10:00:00+00:00", increments_from="2026-11-22T09:00:00+00:00"
    )
    live = {"base": boot}
    partitions = JournalState()
    for e in (entry("2026-11-22T09"), entry("2026-11-22T11", "quarantine", 0)):
        partitions.apply(e)
    with pytest.raises(UnsealedHoursError) as refused:
        plan_merge(orders, period_of(orders, "2026-11-22T12"), live, partitions)
    assert set(refused.value.hours) == {"2026-11-22T11", "2026-11-22T12"}
    assert "quarantined" in refused.value.hours["2026-11-22T11"]
    partitions.apply(entry("2026-11-22T11", "release", 1))
    plan = plan_merge(orders, period_of(orders, "2026-11-22T11"), live, partitions)
    assert plan.hours == {"2026-11-22T09": 1, "2026-11-22T10": 0, "2026-11-22T11": 1}
    assert plan.hour_keys_with_rows() == ["2026-11-22T09", "2026-11-22T11"]


def test_a_snapshot_is_stale_when_an_hour_it_read_or_its_base_changed() -> None:
    boot = record("base", "bootstrap", "2026-11-22T10:00:00+00:00")
    first = record(
        "2026-11-22T10", "merge", "2026-11-22T11:00:00+00:00", base="base@v1", hours={"2026-11-22T10": 1}
    )
    second = record(
        "2026-11-22T11",
        "merge",
        "2026-11-22T12:00:00+00:00",
        base="2026-11-22T10@v1",
        hours={"2026-11-22T11": 1},
    )
    live = {r.label: r for r in (boot, first, second)}
    partitions = JournalState()
    partitions.apply(entry("2026-11-22T10"))
    partitions.apply(entry("2026-11-22T11"))
    assert not is_stale(second, live, partitions)
    partitions.apply(entry("2026-11-22T10", "amend", 2))
    assert is_stale(first, live, partitions) and is_stale(second, live, partitions)  # through its base
    live["2026-11-22T10"] = replace(first, version=2, hours={"2026-11-22T10": 2})
    assert not is_stale(live["2026-11-22T10"], live, partitions)
    assert is_stale(second, live, partitions)  # built on v1
    assert not is_stale(boot, live, partitions)


def test_a_delta_merge_moves_forward_from_the_newest_snapshot_still_current(orders: TableConfig) -> None:
    orders = formatted(orders, "delta")
    boot = record("base", "bootstrap", "2026-11-22T10:00:00+00:00", table_version=0)
    first = record(
        "2026-11-22T10",
        "merge",
        "2026-11-22T11:00:00+00:00",
        base="base@v1",
        hours={"2026-11-22T10": 1},
        table_version=1,
    )
    records = [boot, first]
    partitions = JournalState()
    for hour in ("2026-11-22T10", "2026-11-22T11", "2026-11-22T12"):
        partitions.apply(entry(hour))
    # Forward: the next period is merged into the current version.
    plan = plan_versioned_merge(orders, period_of(orders, "2026-11-22T11"), records, first, partitions)
    assert isinstance(plan, MergePlan) and plan.base == first and list(plan.hours) == ["2026-11-22T11"]
    # The current version, not stale: nothing to do; a period behind it: refused by name.
    assert (
        plan_versioned_merge(orders, period_of(orders, "2026-11-22T10"), records, first, partitions) == first
    )
    with pytest.raises(MergeError, match="bootstrap first"):
        plan_versioned_merge(orders, period_of(orders, "2026-11-22T08"), records, first, partitions)
    # Hour 10 amended: the current version is stale; its re-merge starts from the bootstrap.
    partitions.apply(entry("2026-11-22T10", "amend", 2))
    plan = plan_versioned_merge(orders, period_of(orders, "2026-11-22T10"), records, first, partitions)
    assert isinstance(plan, MergePlan) and plan.base == boot and plan.hours == {"2026-11-22T10": 2}
    # The next period on top of the stale current version reaches back to the bootstrap too.
    plan = plan_versioned_merge(orders, period_of(orders, "2026-11-22T12"), records, first, partitions)
    assert isinstance(plan, MergePlan) and plan.base == boot
    assert plan.hours == {"2026-11-22T10": 2, "2026-11-22T11": 1, "2026-11-22T12": 1}
    second = record(
        "2026-11-22T12",
        "merge",
        "2026-11-22T13:00:00+00:00",
        base="base@v1",
        hours=plan.hours,
        table_version=2,
    )
    with pytest.raises(MergeError, match=r"only move forward.*Delta version 1 keeps 2026-11-22T10@v1"):
        plan_versioned_merge(
            orders, period_of(orders, "2026-11-22T10"), [*records, second], second, partitions
        )


def test_the_bootstrap_job_parses_the_source_beside_its_own_table_argument() -> None:
    parser = job_parser("bootstrap", "test")
    add_source_arguments(parser)
    args = parser.parse_args(
        [
            "--table",
            "orders",
            "--run-id",
            "r",
            "--source-kind",
            "jdbc",
            "--source",
            "jdbc:x",
            "--source-table",
            "src",
        ]
    )
    source = source_from_arguments(args)
    assert args.table == "orders" and (source.kind, source.location, source.table) == (
        "jdbc",
        "jdbc:x",
        "src",
    )
    assert source.num_partitions == 4


def test_one_merge_statement_serves_delta_and_iceberg() -> None:
    """The MERGE both Spark writers run: deletes and updates only when the change is at least
    as new (the increment path), inserts never a delete; a difference applies as is."""
    newer = merge_sql(
        "iceberg.default.o", "src", key=["id"], names=["id", "v"], version_field="v", only_newer=True
    )
    assert newer == (
        "MERGE INTO iceberg.default.o t USING src s ON t.`id` = s.`id` "
        "WHEN MATCHED AND s.`_tm_delete` AND (t.`v` IS NULL OR s.`v` >= t.`v`) THEN DELETE "
        "WHEN MATCHED AND NOT s.`_tm_delete` AND (t.`v` IS NULL OR s.`v` >= t.`v`) THEN UPDATE SET "
        "`id` = s.`id`, `v` = s.`v` WHEN NOT MATCHED AND NOT s.`_tm_delete` THEN INSERT (`id`, `v`) "
        "VALUES (s.`id`, s.`v`)"
    )
    as_is = merge_sql("t", "src", key=["a", "b"], names=["a", "b"], version_field="v", only_newer=False)
    assert "ON t.`a` = s.`a` AND t.`b` = s.`b`" in as_is and "AND true THEN DELETE" in as_is


def test_a_snapshot_log_written_before_iceberg_snapshots_reads_its_delta_version(orders: TableConfig) -> None:
    old = {**record("base", "bootstrap").to_json(), "delta_version": 3}
    old.pop("table_version")
    assert SnapshotRecord.from_json(old).table_version == 3
    assert not is_versioned(orders)
    assert (
        is_versioned(formatted(orders, "iceberg")) and format_name(formatted(orders, "iceberg")) == "Iceberg"
    )


def formatted(config: TableConfig, snapshot_format: str) -> TableConfig:
    assert config.cdc is not None
    return config.model_copy(
        update={"cdc": config.cdc.model_copy(update={"snapshot_format": snapshot_format})}
    )


def test_a_delta_commit_names_its_label_and_carries_its_record_in_user_metadata() -> None:
    """``DESCRIBE HISTORY`` shows each version's label (``userMetadata``); the record comes
    back from it, from delta-rs commits of earlier releases (a commitInfo key), and a user's
    own commit message is no record."""
    written = {"table": "orders", "label": "2026-11-22T10", "run_id": "merge-1", "rows": 3}
    carried = user_metadata(written)
    assert json.loads(carried)["label"] == "2026-11-22T10"
    assert record_of({"userMetadata": carried}) == written
    assert record_of({"tidemark.record": json.dumps(written)}) == written
    assert record_of({"userMetadata": "nightly fix by hand"}) is None
    assert record_of({"userMetadata": "[1, 2]"}) is None
    assert record_of({"operation": "VACUUM END"}) is None


def test_a_replaced_snapshot_version_stays_readable_for_the_grace_after_its_replacement() -> None:
    """``readable_since``: with one label kept, the versions any reader could still be reading
    at or after ``since``: the kept one now, each one replaced after ``since``, and the one in
    effect at ``since``; a version replaced before ``since`` is not."""

    def recorded(seq: int, label: str, version: int, table_version: int, minute: int) -> SnapshotRecord:
        stamp = datetime(2026, 11, 22, 12, minute, tzinfo=UTC).isoformat()
        return record(label, "merge", seq=seq, version=version, table_version=table_version, created_at=stamp)

    log = [
        recorded(1, "base", 1, 0, 0),
        recorded(2, "10", 1, 1, 10),  # base is no longer kept from 12:10
        recorded(3, "10", 2, 2, 20),  # 10 v1 replaced by its own re-merge at 12:20
        recorded(4, "11", 1, 3, 30),
        recorded(5, "11", 2, 4, 40),
    ]

    def refs(since: datetime) -> list[str]:
        return [r.ref for r in readable_since(log, 1, since)]

    assert refs(datetime(2026, 11, 22, 12, 45, tzinfo=UTC)) == ["11@v2"]  # all replaced long ago
    assert refs(datetime(2026, 11, 22, 12, 35, tzinfo=UTC)) == ["11@v1", "11@v2"]
    assert refs(datetime(2026, 11, 22, 12, 15, tzinfo=UTC)) == ["10@v1", "10@v2", "11@v1", "11@v2"]
    assert refs(datetime(2026, 11, 22, 11, 0, tzinfo=UTC)) == [r.ref for r in log]
    # two labels kept: 10's re-merge replaces 10 v1 only; base is pushed out by 11 at 12:30
    assert [r.ref for r in readable_since(log, 2, datetime(2026, 11, 22, 12, 25, tzinfo=UTC))] == [
        "base@v1",
        "10@v2",
        "11@v1",
        "11@v2",
    ]
    assert newest_labels([log[0], replace(log[1], table_version=-1)], 5) == [log[0]]  # uncommitted: none
