"""Helpers of the CDC (orders) tests: comparable snapshot rows and sending changes."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa  # noqa: TID253
import pyarrow.parquet as pq  # noqa: TID253
from deltalake import DeltaTable  # noqa: TID253

from tests.helpers.tables import at, fresh_table
from tidemark.config import TableConfig
from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.snapshot.bootstrap import run_bootstrap
from tidemark.snapshot.delta import is_delta
from tidemark.snapshot.formats import is_versioned, read_snapshot
from tidemark.snapshot.snapshots import SnapshotLog, SnapshotStore
from tidemark.snapshot.sources import BootstrapSource
from tidemark.state.layout import Layout
from tidemark_dev.duckdb_reader import duckdb_connection
from tidemark_dev.generator import Message, change_messages, create_topic, order_changes, produce, state_after

Row = tuple[Any, ...]
Delivered = list[tuple[int, int, dict[str, Any]]]


def normal(row: dict[str, Any]) -> Row:
    """A snapshot row as comparable text: amounts to 2 places, instants in UTC."""
    when = datetime.fromisoformat(str(row["updated_at"])).astimezone(UTC)
    return (
        int(row["order_id"]),
        int(row["version"]),
        None if row["customer_id"] is None else int(row["customer_id"]),
        row["status"],
        f"{float(row['amount']):.2f}",
        when.strftime("%Y-%m-%d %H:%M:%S.%f"),
    )


def truth(state: dict[int, dict[str, Any]]) -> list[Row]:
    return sorted(normal(r) for r in state.values())


def late_update(row: dict[str, Any], when: datetime, version: int = 1000) -> dict[str, Any]:
    """An update of ``row`` timed ``when`` (an hour already sealed): its late change."""
    return {**row, "op": "u", "version": version, "status": "late", "updated_at": when.isoformat()}


def send(
    broker: str,
    config: TableConfig,
    changes: list[dict[str, Any]],
    *,
    duplicates: float = 0,
    reorder: float = 0,
) -> Delivered:
    """Produce the changes as the table's ``cdc.envelope`` sends them (Debezium: the row in
    ``after``, or ``before`` for a delete, the version as ``source.lsn``, a tombstone after each
    delete); return (partition, offset, flat change) of every change message."""
    messages = change_messages(changes, partitions=2, duplicates=duplicates, reorder=reorder)
    envelope = config.cdc.envelope if config.cdc else "flat"
    if envelope == "debezium":
        messages = [m for message in messages for m in debezium(message)]
    elif envelope != "flat":
        raise ValueError(f"no test producer for the {envelope} envelope")
    delivered = produce(broker, config.source.topic, messages)
    return [(p, o, flat(m.value)) for p, o, m in delivered if m.value is not None]


def debezium(message: Message) -> list[Message]:
    change = json.loads(message.value or b"null")
    row = {k: v for k, v in change.items() if k not in {"op", "version"}}
    envelope = {
        "before": row if change["op"] == "d" else None,
        "after": None if change["op"] == "d" else row,
        "op": change["op"],
        "source": {"connector": "postgresql", "lsn": change["version"], "db": "shop", "table": "orders"},
        "ts_ms": int(datetime.fromisoformat(change["updated_at"]).timestamp() * 1000),
    }
    wrapped = replace(message, value=json.dumps(envelope).encode())
    return [wrapped, replace(message, value=None)] if change["op"] == "d" else [wrapped]


def flat(value: bytes) -> dict[str, Any]:
    """The flat change of a produced message (a Debezium envelope read back)."""
    message = json.loads(value)
    if "source" not in message:
        return message
    row = message["before"] if message["op"] == "d" else message["after"]
    return {**row, "op": message["op"], "version": message["source"]["lsn"]}


def write_parquet_source(path: Path, state: dict[int, dict[str, Any]]) -> Path:
    """The source as Parquet files (what an export of the OLTP table would give)."""
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("*.parquet"):
        old.unlink()
    rows = list(state.values())
    table = pa.table(
        {
            "order_id": pa.array([r["order_id"] for r in rows], pa.int64()),
            "version": pa.array([r["version"] for r in rows], pa.int64()),
            "customer_id": pa.array([r["customer_id"] for r in rows], pa.int64()),
            "status": pa.array([r["status"] for r in rows], pa.string()),
            "amount": pa.array([r["amount"] for r in rows], pa.string()),
            "updated_at": pa.array(
                [datetime.fromisoformat(r["updated_at"]) for r in rows], pa.timestamp("us", "UTC")
            ),
            "note": pa.array(["extra column, ignored"] * len(rows), pa.string()),
        }
    )
    pq.write_table(table, path / "part-0.parquet")
    return path


def snapshot(
    spark: Any, config: TableConfig, label: str, settings: Settings | None = None, *, by_name: bool = True
) -> list[Row]:
    """The snapshot as its readers see it by name, failing on a duplicated key: a Parquet
    snapshot's partition as the metastore serves it; a Delta snapshot's label as delta-spark
    reads the registered Delta table, ``VERSION AS OF`` the version ``DESCRIBE HISTORY`` names
    for the label (and by its name alone when the label is the current version), checked
    against Spark reading the version's files and delta-rs; an
    Iceberg snapshot's label by its tag in Spark SQL (and the table's name when current),
    checked against pyiceberg reading the tag (``by_name=False``: the files only, for jobs
    that wrote to another metastore or catalog)."""
    if is_versioned(config):  # a label tidemark no longer keeps is refused (MergeError) first
        assert settings is not None
        read_snapshot(spark, config, settings, label).createOrReplaceTempView("tm_snapshot")
    if is_versioned(config) and not by_name:
        relation = "tm_snapshot"
    elif is_delta(config):
        relation = f"`{config.snapshot_table}` VERSION AS OF {delta_label_version(spark, config, label)}"
    elif is_versioned(config):
        assert settings is not None
        relation = f"{iceberg_name(settings, config)} VERSION AS OF '{label}'"
    else:
        spark.catalog.refreshTable(config.snapshot_table)
        relation = f"`{config.snapshot_table}` WHERE snapshot_dt = '{label}'"
    rows = keyed_once(_rows(spark, relation), label)
    if not is_versioned(config):
        return rows
    assert settings is not None
    assert _rows(spark, "tm_snapshot") == rows
    live = SnapshotLog(settings.state_location, config.table).live()
    current = by_name and max(live.values(), key=lambda r: r.table_version).label == label
    if is_delta(config):
        if by_name:
            assert delta_label_version(spark, config, label) == live[label].table_version
        if current:
            assert _rows(spark, f"`{config.snapshot_table}`") == rows
        delta = DeltaTable(
            str(SnapshotStore(spark, config, settings).table_dir), version=live[label].table_version
        )
        assert sorted(normal(r) for r in delta.to_pyarrow_table().to_pylist()) == rows
        return rows
    if current:
        assert _rows(spark, iceberg_name(settings, config)) == rows
    if by_name:
        table = open_catalog(settings).load_table(identifier(config.snapshot_table))
        tag = table.snapshot_by_name(label)
        assert tag is not None, f"{label}: no tag"
        assert tag.sequence_number == live[label].table_version
        scanned = table.scan(snapshot_id=tag.snapshot_id).to_arrow().to_pylist()
        assert sorted(normal(r) for r in scanned) == rows
    return rows


def delta_label_version(spark: Any, config: TableConfig, label: str) -> int:
    """The Delta version holding ``label``, as docs/operations.md tells a delta-spark reader to
    find it: the newest commit whose ``userMetadata`` names the label."""
    from pyspark.sql import functions as F

    found = (
        spark.sql(f"DESCRIBE HISTORY `{config.snapshot_table}`")
        .where(F.get_json_object("userMetadata", "$.label") == label)
        .agg(F.max("version"))
        .first()[0]
    )
    assert found is not None, f"{label}: no Delta commit names it"
    return int(found)


def duckdb_snapshot(settings: Settings, config: TableConfig, label: str | None = None) -> list[Row]:
    """A versioned snapshot table read by DuckDB: the current state, or ``label``'s. Iceberg
    through its extension on the table's current metadata file from the catalog, the label
    by its tag; Delta through its extension on the table's directory, the label by the
    version its record names (as ``tidemark status`` prints it)."""
    if is_delta(config):
        root = str(Layout(settings, config.snapshot_table).table_dir)
        at_version = "" if label is None else f", version => {_label_version(settings, config, label)}"
        relation = f"delta_scan('{root}'{at_version})"
    else:
        table = open_catalog(settings).load_table(identifier(config.snapshot_table))
        at_tag = ""
        if label is not None:
            tag = table.snapshot_by_name(label)
            assert tag is not None, f"{label}: no tag"
            at_tag = f", snapshot_from_id => {tag.snapshot_id}"
        relation = f"iceberg_scan('{table.metadata_location}'{at_tag})"
    found = duckdb_connection().sql(
        "SELECT order_id, version, customer_id, status, CAST(amount AS VARCHAR) AS amount, updated_at "
        f"FROM {relation}"
    )
    names = [c[0] for c in found.description]
    return keyed_once([normal(dict(zip(names, r, strict=True))) for r in found.fetchall()], "duckdb")


def _label_version(settings: Settings, config: TableConfig, label: str) -> int:
    return SnapshotLog(settings.state_location, config.table).live()[label].table_version


def iceberg_name(settings: Settings, config: TableConfig) -> str:
    return f"{settings.iceberg_catalog}.{identifier(config.snapshot_table)}"


def keyed_once(rows: list[Row], what: str) -> list[Row]:
    """``rows`` sorted, failing if a key is there twice (a snapshot holds one row per key)."""
    keys = [r[0] for r in rows]
    assert len(keys) == len(set(keys)), f"{what}: duplicated keys"
    return sorted(rows)


def _rows(spark: Any, relation: str) -> list[Row]:
    frame = spark.sql(
        f"SELECT order_id, version, customer_id, status, CAST(amount AS STRING) amount, "
        f"date_format(updated_at, 'yyyy-MM-dd HH:mm:ss.SSSSSS') || 'Z' updated_at FROM {relation}"
    )
    return sorted(
        normal({**r.asDict(), "updated_at": r["updated_at"].replace(" ", "T")}) for r in frame.collect()
    )


def orders_table(
    settings: Settings,
    tmp_path: Path,
    broker: str,
    snapshot_format: str = "parquet",
    envelope: str = "flat",
    output_format: str = "parquet",
    **overrides: Any,
) -> tuple[TableConfig, Settings]:
    """A fresh orders table (hourly snapshots) and its 2-partition topic; ``overrides`` as
    ``fresh_table`` takes them."""
    config, settings = fresh_table(
        settings,
        tmp_path,
        template="orders",
        cdc__snapshot_every="hour",
        cdc__snapshot_format=snapshot_format,
        cdc__envelope=envelope,
        output__format=output_format,
        **overrides,
    )
    create_topic(broker, config.source.topic, 2)
    return config, settings


BOOTSTRAP_AT = at(10)


def ingest(spark: Any, config: TableConfig, settings: Settings, run: str, processing: datetime) -> None:
    run_dump(spark, config, settings, run, processing)
    run_seal(spark, config, settings, run)


def history() -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """Changes before the bootstrap (09:00-10:00) and the source state they leave."""
    before = order_changes(120, start=at(9), seed=1)
    return before, state_after(before)


def bootstrapped(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, snapshot_format: str, **overrides: Any
) -> tuple[TableConfig, Settings, dict[int, dict[str, Any]], Any]:
    """A fresh orders table whose history is in the topic and in a Parquet source, bootstrapped
    at 10:00 as snapshot ``base``; ``overrides`` as ``fresh_table`` takes them."""
    config, settings = orders_table(settings, tmp_path, broker, snapshot_format, **overrides)
    before, source_state = history()
    send(broker, config, before)
    source = BootstrapSource("parquet", str(write_parquet_source(tmp_path / "src", source_state)))
    boot = run_bootstrap(spark, config, settings, "boot-1", source, as_of=BOOTSTRAP_AT, label="base")
    assert sum(boot.aligned_offsets.values()) == len(before)
    return config, settings, source_state, boot


def three_hours_of_changes(
    spark: Any, broker: str, config: TableConfig, settings: Settings, source_state: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Changes from 10:00 to 13:30 sent and ingested (hours 10-12 sealed); returns them."""
    after = order_changes(200, start=at(10), span=at(13, 30) - at(10), existing=source_state, seed=7)
    send(broker, config, after)
    ingest(spark, config, settings, "ingest-1", at(13, 40))
    return after
