"""Shared helpers of the dump tests: a fresh table config per test and the landed offsets."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import yaml

from tidemark.config import TableConfig, load_table_file
from tidemark.settings import Settings
from tidemark.state.journal import JournalState
from tidemark.state.layout import Layout, version_dir_of
from tidemark.tablefs import Store

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
PROCESSING = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
DAY = datetime(2026, 11, 22, tzinfo=UTC)
# A table expectation most test hours pass and an amount of 500 fails.
AMOUNT_AT_MOST_100 = [
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "amount", "max_value": 100}}
]


def at(hh: int, mm: int = 0) -> datetime:
    """An instant on the test day, UTC."""
    return DAY + timedelta(hours=hh, minutes=mm)


def registered(spark: Any, table: str) -> list[str]:
    """The table's partitions in the metastore."""
    return sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS `{table}`").collect())


def fresh_table(
    settings: Settings, tmp_path: Path, *, template: str = "events", **overrides: Any
) -> tuple[TableConfig, Settings]:
    """A conf/tables example under a unique table/topic name, with its own conf dir."""
    data = yaml.safe_load((ROOT / "conf" / "tables" / f"{template}.yaml").read_text())
    name = f"{template[:2]}_{uuid.uuid4().hex[:8]}"
    data["table"] = name
    data["source"]["topic"] = name
    for dotted, value in overrides.items():
        target = data
        *parents, last = dotted.split("__")
        for key in parents:
            target = target.setdefault(key, {})
        target[last] = value
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir(exist_ok=True)
    path = conf_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_table_file(path), replace(settings, conf_dir=conf_dir)


def landed(
    settings: Settings, table: str, current: JournalState | None = None
) -> tuple[Counter[tuple[int, int]], Counter[tuple[int, int]], dict[tuple[int, int], str]]:
    """(partition, offset) multisets of the table's rows (every Parquet file under the table's
    directory, hidden ones included; with ``current``, a versioned layout's, only the version
    directories its hours name, not the replaced ones kept for their grace) and of its visible
    dirty records, and the dirty reasons; on the local disk or an object store."""
    layout = Layout(settings, table)
    store = layout.store
    named = {version_dir_of(f) for e in current.hours.values() for f in e.files} if current else set()
    rows: Counter[tuple[int, int]] = Counter()
    for relative in store.all_files(layout.relative(layout.table_dir)):
        version = version_dir_of(relative)
        if relative.endswith(".parquet") and (current is None or version is None or version in named):
            rows.update(read_pairs(store, relative, "_mq_partition", "_mq_offset"))
    dirty: Counter[tuple[int, int]] = Counter()
    reasons = {}
    for relative in store.files(layout.relative(layout.dirty_dir)):  # no hidden parts (_replayed)
        t = read_columns(store, relative, ["mq_partition", "mq_offset", "reason"])
        for p, o, r in zip(*(c.to_pylist() for c in t.columns), strict=True):
            dirty[(p, o)] += 1
            reasons[(p, o)] = r
    return rows, dirty, reasons


def read_columns(store: Store, relative: str, columns: list[str]) -> Any:
    """Some columns of one Parquet file of a store; INT96 instants (a Hive table's files, its
    batch files too) read back as the UTC instants they are."""
    import pyarrow as pa

    with store.fs.open_input_file(store.path(relative)) as handle:
        file = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
        schema = file.schema
        int96 = {
            schema.column(i).name for i in range(len(schema)) if schema.column(i).physical_type == "INT96"
        }
        table = file.read(columns=columns)
    fields = [pa.field(f.name, pa.timestamp("us", tz="UTC")) if f.name in int96 else f for f in table.schema]
    return table.cast(pa.schema(fields))


def read_pairs(store: Store, relative: str, first: str, second: str) -> Counter[tuple[int, int]]:
    t = read_columns(store, relative, [first, second])
    return Counter(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))


def late_landed(settings: Settings, table: str) -> Counter[tuple[int, int]]:
    """(partition, offset) multiset of the late files of a table."""
    late: Counter[tuple[int, int]] = Counter()
    for path in Layout(settings, table).late_dir.rglob("*.parquet"):
        t = pq.read_table(path, columns=["_mq_partition", "_mq_offset"])
        late.update(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))
    return late
