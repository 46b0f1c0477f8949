"""Every column type with its edge values (tests/integration/test_exact_values.py, and on S3
tests/e2e/test_exact_values_s3.py): the Avro records, what each format must refuse, and an
exact comparison (NaN is NaN, -0.0 is not 0.0, an instant is an instant)."""

from __future__ import annotations

import io
import math
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.helpers.tables import at, fresh_table
from tidemark.config import TableConfig
from tidemark.settings import Settings
from tidemark_dev.duckdb_reader import duckdb_connection
from tidemark_dev.generator import Message, create_topic, produce

SCHEMA = {
    "event_id": "string not null",
    "event_time": "timestamp not null",
    "ts": "timestamp",
    "d": "date",
    "tiny": "tinyint",
    "small": "smallint",
    "i": "int",
    "big": "bigint",
    "f": "float",
    "db": "double",
    "dec": "decimal(38,0)",
    "dsm": "decimal(9,2)",
    "flag": "boolean",
    "s": "string",
    "b": "binary",
    "arr": "array<bigint>",
    "arr_ts": "array<timestamp>",
    "st": "struct<x:int,t:timestamp>",
    "mp": "map<string,bigint>",
    "mp_d": "map<string,date>",
}


def _nullable(kind: Any) -> list[Any]:
    return ["null", kind]


MICROS = {"type": "long", "logicalType": "timestamp-micros"}
DATE = {"type": "int", "logicalType": "date"}
AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Edge",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "event_time", "type": MICROS},
        *(
            {"name": name, "type": _nullable(kind), "default": None}
            for name, kind in [
                ("ts", MICROS),
                ("d", DATE),
                ("tiny", "int"),
                ("small", "int"),
                ("i", "int"),
                ("big", "long"),
                ("f", "float"),
                ("db", "double"),
                ("dec", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 0}),
                ("dsm", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}),
                ("flag", "boolean"),
                ("s", "string"),
                ("b", "bytes"),
                ("arr", {"type": "array", "items": _nullable("long")}),
                ("arr_ts", {"type": "array", "items": MICROS}),
                (
                    "st",
                    {
                        "type": "record",
                        "name": "Inner",
                        "fields": [
                            {"name": "x", "type": _nullable("int"), "default": None},
                            {"name": "t", "type": _nullable(MICROS), "default": None},
                        ],
                    },
                ),
                ("mp", {"type": "map", "values": _nullable("long")}),
                ("mp_d", {"type": "map", "values": DATE}),
            ]
        ),
    ],
}


def _ts(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micros: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micros, tzinfo=UTC)


# (values, refused by: "both" formats, "orc" only, or None: every reader reads it exactly)
EDGES: list[tuple[dict[str, Any], str | None]] = [
    ({"ts": _ts(1969, 7, 20, 20, 17, 40, 123456)}, "orc"),
    ({"ts": _ts(1969, 12, 31, 23, 59, 59, 999999)}, "orc"),
    ({"ts": _ts(1899, 12, 31, 23, 59, 59, 500000)}, "orc"),
    ({"ts": _ts(1969, 12, 31, 23, 59, 58)}, None),
    ({"ts": _ts(1899, 12, 31, 23, 59, 59)}, None),
    ({"ts": _ts(1000, 1, 1, 12)}, "both"),
    ({"ts": _ts(1582, 10, 4)}, "both"),
    ({"ts": _ts(1582, 10, 15)}, "orc"),
    ({"ts": _ts(1677, 9, 22)}, None),
    ({"ts": _ts(1970, 1, 1, 0, 0, 0, 1)}, None),
    ({"ts": _ts(2262, 4, 12)}, "orc"),
    ({"ts": _ts(9999, 12, 31, 23, 59, 59, 999999)}, "orc"),
    ({"d": date(1000, 1, 1)}, "both"),
    ({"d": date(1582, 10, 4)}, "both"),
    ({"d": date(1582, 10, 15)}, None),
    ({"d": date(1899, 12, 31)}, None),
    ({"d": date(1969, 12, 31)}, None),
    ({"d": date(2262, 4, 12)}, None),
    ({"d": date(9999, 12, 31)}, None),
    ({"tiny": -128, "small": -32768, "i": -(2**31), "big": -(2**63)}, None),
    ({"tiny": 127, "small": 32767, "i": 2**31 - 1, "big": 2**63 - 1}, None),
    ({"dec": Decimal(10**38 - 1), "dsm": Decimal("9999999.99")}, None),
    ({"dec": Decimal(-(10**38) + 1), "dsm": Decimal("-9999999.99")}, None),
    ({"f": float("nan"), "db": float("nan")}, None),
    ({"f": -0.0, "db": -0.0}, None),
    ({"f": float("inf"), "db": float("-inf")}, None),
    ({"f": 3.4028234663852886e38, "db": 5e-324}, None),
    ({"db": 1.7976931348623157e308, "flag": False}, None),
    ({"s": "", "b": b"", "flag": True}, None),
    ({"s": "ünï \u6f22 \u00a0", "b": b"\x00\xff"}, None),
    ({"arr": [], "arr_ts": [], "mp": {}, "mp_d": {}}, None),
    ({"arr": [None, -(2**63)], "mp": {"k": None, "": 1}}, None),
    ({"st": {"x": None, "t": None}}, None),
    ({"st": {"x": -1, "t": _ts(2026, 11, 22, 10, 0, 0, 1)}}, None),
    ({"arr_ts": [_ts(1969, 12, 31, 23, 59, 59, 500000)]}, "orc"),
    ({"arr_ts": [_ts(1000, 1, 1)]}, "both"),
    ({"st": {"x": 1, "t": _ts(1500, 1, 1)}}, "both"),
    ({"mp_d": {"a": date(1000, 1, 1)}}, "both"),
    ({"mp_d": {"a": date(2000, 2, 29)}}, None),
]


def edge_table(settings: Settings, tmp_path: Path, fmt: str, broker: str) -> tuple[TableConfig, Settings]:
    """A fresh Avro table of ``SCHEMA`` in ``fmt`` (parquet | orc) that takes every dirty
    record, its topic made and holding :func:`messages`."""
    config, own = fresh_table(
        settings,
        tmp_path,
        schema=SCHEMA,
        source__format="avro",
        source__writer_schema=AVRO,
        output__format=fmt,
        dirty__max_dirty_ratio=1.0,
    )
    create_topic(broker, config.source.topic, 1)
    produce(broker, config.source.topic, messages())
    return config, own


def messages() -> list[Message]:
    """One message per edge (offset n is event ``e<n>``, hour 10), then one at 11:40 that
    moves the watermark past hour 10."""
    out = [_message(f"e{n}", at(10, n % 60), values) for n, (values, _) in enumerate(EDGES)]
    return [*out, _message("closing", at(11, 40), {})]


def _message(event_id: str, event_time: datetime, values: dict[str, Any]) -> Message:
    from fastavro import parse_schema, schemaless_writer

    record: dict[str, Any] = {f["name"]: None for f in AVRO["fields"]}
    record.update(event_id=event_id, event_time=event_time, **values)
    buffer = io.BytesIO()
    schemaless_writer(buffer, parse_schema(AVRO), record)
    return Message(0, buffer.getvalue(), None, event_time)


def expected(fmt: str) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """The rows every reader must read (event id -> values), and the refused event ids."""
    rows, refused = {}, set()
    for n, (values, refused_by) in enumerate(EDGES):
        if refused_by in ("both", fmt):
            refused.add(f"e{n}")
            continue
        row = {name: None for name in SCHEMA if name not in ("event_id", "event_time")}
        row.update(values)
        rows[f"e{n}"] = row
    return rows, refused


def same(got: Any, want: Any) -> bool:
    """Exactly equal: NaN is NaN, -0.0 is not 0.0, an instant is an instant."""
    if isinstance(want, float):
        if not isinstance(got, float):
            return False
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)
    if isinstance(want, datetime):
        if not isinstance(got, datetime):
            return False
        return (got if got.tzinfo else got.replace(tzinfo=UTC)) == want
    if isinstance(want, dict):
        got = dict(got) if isinstance(got, list) else got  # pyarrow reads a map as pairs
        return (
            isinstance(got, dict) and got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
        )
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(same, got, want))
    if isinstance(want, bytes):
        return isinstance(got, (bytes, bytearray)) and bytes(got) == want
    return type(got) is type(want) and got == want if want is not None else got is None


def differences(reader: str, got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> list[str]:
    problems = [f"{reader}: rows {sorted(set(got) ^ set(want))} differ"] if got.keys() != want.keys() else []
    for event_id in sorted(set(got) & set(want)):
        for column, value in want[event_id].items():
            if not same(got[event_id].get(column), value):
                problems.append(
                    f"{reader}: {event_id}.{column} read {got[event_id].get(column)!r}, wrote {value!r}"
                )
    return problems


def refused_offsets(fmt: str) -> set[tuple[int, int]]:
    """(MQ partition, offset) of the records ``fmt`` must refuse (one message per offset)."""
    return {(0, int(event_id[1:])) for event_id in expected(fmt)[1]}


def read_hour_files(store: Any, files: list[str]) -> dict[str, dict[str, Any]]:
    """Rows of an hour's data files (warehouse-relative, Parquet or ORC) as pyarrow reads them,
    by event id (INT96 timestamps at microseconds: years past 2262 too)."""
    import pyarrow as pa
    import pyarrow.orc as orc
    import pyarrow.parquet as pq

    tables = []
    for relative in files:
        with store.fs.open_input_file(store.path(relative)) as handle:
            if relative.endswith(".orc"):
                tables.append(orc.ORCFile(handle).read())
            else:
                tables.append(pq.read_table(handle, coerce_int96_timestamp_unit="us"))
    return {r["event_id"]: r for r in pa.concat_tables(tables).to_pylist()}


def read_hour_files_duckdb(store: Any, files: list[str]) -> dict[str, dict[str, Any]]:
    """Rows of an hour's Parquet files as DuckDB reads them (``read_parquet``; on S3 through
    its httpfs extension), by event id. DuckDB has no ORC reader of its own."""
    locations = [store.uri(relative).replace("s3a://", "s3://", 1) for relative in files]
    found = duckdb_connection().execute("SELECT * FROM read_parquet(?)", [locations])
    names = [c[0] for c in found.description]
    return {row["event_id"]: row for row in (dict(zip(names, r, strict=True)) for r in found.fetchall())}
