"""Pure transforms of the dump: raw MQ records -> typed rows or dirty records.

Parsing happens in Arrow, inside the data source's tasks: ``pyarrow.json`` reads a block of
messages against the table schema in C++, which costs a fifth of the CPU of Spark's
``from_json`` + casts (docs/benchmarks.md). A block the reader rejects is re-read in pieces
down to the records at fault, so one bad record costs a few small re-reads, never the block.

Typing is strict, as the JSON reader is: a JSON string is not a number, a number is not a
string, a decimal with more places than its scale is not rounded. Timestamps are ISO 8601
strings (``2026-11-22T10:00:00Z``, ``2026-11-22 10:00:00+01:00``; no offset means UTC);
dates are ``YYYY-MM-DD`` strings; decimals are numbers or numeric strings.

Each record is classified once, with the first reason that applies, in this order:

| reason | when |
|---|---|
| ``oversized`` | the message is larger than ``source.max_message_bytes`` |
| ``null_value`` | the message has no value (a tombstone) |
| ``invalid_json`` | the value is not a JSON object |
| ``null_event_time`` | the event-time field is missing or null |
| ``missing_field`` | a ``not null`` column is missing or null |
| ``type_mismatch`` | a value cannot be converted to its column's type |
| ``future_event_time`` | event time > the batch's processing time + ``watermark.max_future_skew`` |
| ``invalid_partition_value`` | a value of a ``partitioning.columns`` column is null, longer than 64, or \
not made of ``[A-Za-z0-9_.-]`` (so no path separators, ``..``, quotes or spaces) |
| ``partition_cardinality`` | the value would exceed ``partitioning.max_values_per_column`` distinct \
values of its column in its hour (decided after this classification, see ``cardinality.py``) |

Good records whose event time is before the plan's ``sealed_through`` belong to an hour that
is already sealed: they are *late* (``_late``) and go to the late files, never to the table.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from tidemark.hours import hour_of
from tidemark.schema import Column, parse_column

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from tidemark.config import TableConfig

REASONS = (
    "oversized",
    "null_value",
    "invalid_json",
    "null_event_time",
    "missing_field",
    "type_mismatch",
    "future_event_time",
    "invalid_partition_value",
    "partition_cardinality",
)
# Values of data-derived partition columns: safe in paths and in quoted metastore DDL.
PARTITION_VALUE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
META_COLUMNS = ("_mq_partition", "_mq_offset", "_mq_timestamp", "_batch_id")
HOUR_COLUMNS = ("dt", "hr")
# The fixed columns, (name, Spark type) declared once: Arrow schemas and the data source's DDL
# are derived from them (``schema.SqlType.to_arrow``).
LINEAGE_FIELDS = (
    ("dt", "string"),
    ("hr", "string"),
    ("_late", "boolean"),
    ("_mq_partition", "int"),
    ("_mq_offset", "bigint"),
    ("_mq_timestamp", "bigint"),
    ("_batch_id", "bigint"),
)
RAW_FIELDS = (("_raw_key", "binary"), ("_raw_value", "binary"))
VERDICT_FIELDS = (("_reason", "string"), ("_detail", "string"), ("_topic", "string"), ("_run_id", "string"))
DIRTY_FIELDS = (
    ("topic", "string"),
    ("mq_partition", "int"),
    ("mq_offset", "bigint"),
    ("mq_timestamp", "bigint"),
    ("batch_id", "bigint"),
    ("run_id", "string"),
    ("reason", "string"),
    ("detail", "string"),
    ("raw_key", "binary"),
    ("raw_value", "binary"),
)
DIRTY_COLUMNS = tuple(name for name, _ in DIRTY_FIELDS)
# A rejected block is re-read in pieces of at most this many records; within a piece the row
# the reader names is set aside and the rest re-read.
PARSE_PIECE = 256
_ERROR_ROW = re.compile(r" in row (\d+)$")
INTEGER_BITS = {"tinyint": 7, "smallint": 15, "int": 31, "bigint": 63}


@dataclass(frozen=True)
class ClassifySpec:
    """Everything a task needs to classify a batch's records: plain values, so it travels to
    executors as a JSON option (no TableConfig, no YAML on the executors)."""

    topic: str
    batch_id: int
    run_id: str
    columns: tuple[tuple[str, str], ...]  # (name, "ddl [not null]")
    event_time_field: str
    time_zone: str
    max_message_bytes: int
    future_limit: str  # ISO instant: event times after it are dirty
    sealed_through: str | None  # ISO instant: good rows before it are late
    partition_columns: tuple[str, ...]

    @classmethod
    def of(
        cls,
        config: TableConfig,
        *,
        topic: str,
        batch_id: int,
        run_id: str,
        processing_time: datetime,
        sealed_through: datetime | None,
    ) -> ClassifySpec:
        return cls(
            topic=topic,
            batch_id=batch_id,
            run_id=run_id,
            columns=tuple(
                (c.name, c.type.ddl() + ("" if c.nullable else " not null")) for c in config.schema_columns
            ),
            event_time_field=config.event_time.field,
            time_zone=config.event_time.time_zone,
            max_message_bytes=config.source.max_message_bytes,
            future_limit=_utc(processing_time + config.watermark.max_future_skew).isoformat(),
            sealed_through=_utc(sealed_through).isoformat() if sealed_through else None,
            partition_columns=tuple(config.partitioning.columns),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ClassifySpec:
        data = json.loads(text)
        data["columns"] = tuple(tuple(c) for c in data["columns"])
        data["partition_columns"] = tuple(data["partition_columns"])
        return cls(**data)

    @property
    def schema_columns(self) -> list[Column]:
        return [parse_column(name, spec) for name, spec in self.columns]

    @property
    def keep_raw(self) -> bool:
        """Good rows keep their raw bytes only where the cardinality bound may still make them
        dirty after this classification (tables with data-derived partition columns)."""
        return bool(self.partition_columns)


def _utc(instant: datetime) -> datetime:
    return instant.replace(tzinfo=UTC) if instant.tzinfo is None else instant.astimezone(UTC)


@dataclass
class RawRecords:
    """One block of consumed messages of one MQ partition, as the consumer hands them out."""

    partition: int
    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True)
class Classified:
    """A classified block: ``good`` has the typed columns, hour labels, ``_late`` and MQ
    lineage (plus raw bytes when the spec keeps them); ``dirty`` has DIRTY_COLUMNS."""

    good: pa.Table
    dirty: pa.Table


def _arrow_fields(fields: Sequence[tuple[str, str]]) -> list[pa.Field]:
    import pyarrow as pa

    return [pa.field(name, parse_column(name, ddl).type.to_arrow()) for name, ddl in fields]


def good_schema(spec: ClassifySpec, *, raw: bool | None = None) -> pa.Schema:
    """Schema of classified good rows; ``raw`` (default: the spec's ``keep_raw``) adds the
    raw key and value."""
    import pyarrow as pa

    fields = [pa.field(c.name, c.type.to_arrow()) for c in spec.schema_columns]
    fields += _arrow_fields(LINEAGE_FIELDS)
    if spec.keep_raw if raw is None else raw:
        fields += _arrow_fields(RAW_FIELDS)
    return pa.schema(fields)


def dirty_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(_arrow_fields(DIRTY_FIELDS))


def _parse_schema(columns: list[Column]) -> pa.Schema:
    """What the JSON reader is asked for: the table's types, but top-level dates as strings
    (the reader reads dates from day numbers only)."""
    import pyarrow as pa

    return pa.schema(
        [pa.field(c.name, pa.string() if c.type.name == "date" else c.type.to_arrow()) for c in columns]
    )


class _Reader:
    """``pyarrow.json`` over lines of messages; a rejected piece is narrowed to its bad lines."""

    def __init__(self, schema: pa.Schema) -> None:
        import pyarrow.json as pj

        self.schema = schema
        self.parse_options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")

    def _read(self, lines: Sequence[bytes]) -> pa.Table:
        import pyarrow.json as pj

        data = b"\n".join(lines)
        options = pj.ReadOptions(use_threads=False, block_size=max(len(data) + 1, 1 << 16))
        return pj.read_json(io.BytesIO(data), read_options=options, parse_options=self.parse_options)

    def read(self, lines: Sequence[bytes]) -> tuple[list[tuple[list[int], pa.Table]], dict[int, str]]:
        """Tables of the accepted lines, each with the indices of its lines (increasing), and
        the reader's error for each rejected line."""
        tables: list[tuple[list[int], pa.Table]] = []
        rejected: dict[int, str] = {}
        self._narrow(lines, list(range(len(lines))), tables, rejected)
        return tables, rejected

    def _narrow(
        self,
        lines: Sequence[bytes],
        index: list[int],
        tables: list[tuple[list[int], pa.Table]],
        rejected: dict[int, str],
    ) -> None:
        import pyarrow as pa

        while index:
            try:
                table = self._read(lines if len(index) == len(lines) else [lines[i] for i in index])
                if table.num_rows == len(index):
                    tables.append((index, table))
                    return
                error = f"{table.num_rows} rows read from {len(index)} messages"
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                error = str(exc)
            if len(index) == 1:
                rejected[index[0]] = error
                return
            if len(index) > PARSE_PIECE:
                for start in range(0, len(index), PARSE_PIECE):
                    self._narrow(lines, index[start : start + PARSE_PIECE], tables, rejected)
                return
            match = _ERROR_ROW.search(error)
            row = int(match.group(1)) if match else -1
            if 0 <= row < len(index):  # the reader named the line: set it aside, read the rest
                rejected[index[row]] = error
                index = index[:row] + index[row + 1 :]
                continue
            middle = len(index) // 2
            self._narrow(lines, index[:middle], tables, rejected)
            index = index[middle:]


def _json_line(value: bytes) -> bytes | str:
    """The message as one JSON line for the reader, or why it is not a JSON object.

    A message with line breaks (pretty-printed JSON) is re-serialized on one line; a line
    break inside a string is not valid JSON, which ``json.loads`` reports."""
    if b"\n" not in value and b"\r" not in value:
        return value
    try:
        obj = json.loads(value)
    except ValueError as exc:
        return f"invalid JSON: {exc}"
    if not isinstance(obj, dict):
        return f"not a JSON object but {type(obj).__name__}"
    return json.dumps(obj, separators=(",", ":")).encode()


class Classifier:
    """Classifies blocks of raw records by a spec; one per task (it keeps the JSON readers)."""

    def __init__(self, spec: ClassifySpec) -> None:
        import pyarrow as pa

        self.spec = spec
        self.columns = spec.schema_columns
        self.reader = _Reader(_parse_schema(self.columns))
        self.column_readers = {
            c.name: _Reader(pa.schema([self.reader.schema.field(c.name)])) for c in self.columns
        }
        self.good_schema = good_schema(spec)
        self.dirty_schema = dirty_schema()
        self.future_limit = datetime.fromisoformat(spec.future_limit)
        self.sealed_through = datetime.fromisoformat(spec.sealed_through) if spec.sealed_through else None
        self._hours: dict[int, tuple[str, str]] = {}

    def classify(self, raw: RawRecords) -> Classified:
        import pyarrow as pa

        dirty: dict[int, tuple[str, str | None]] = {}  # record index -> (reason, detail)
        lines, line_of = self._lines(raw, dirty)
        pieces, rejected = self.reader.read(lines)
        for line, error in rejected.items():
            dirty[line_of[line]] = self._rejected_reason(lines[line], error)
        accepted = [line_of[i] for index, _ in pieces for i in index]
        typed = pa.concat_tables([t for _, t in pieces]) if pieces else self.reader.schema.empty_table()
        good, checked_dirty = self._check(typed, accepted, raw)
        dirty.update(checked_dirty)
        return Classified(good=good, dirty=self._dirty_table(raw, dirty))

    def _lines(
        self, raw: RawRecords, dirty: dict[int, tuple[str, str | None]]
    ) -> tuple[list[bytes], list[int]]:
        """The messages the JSON reader gets, one per line, and the record of each line; the
        others get their reason in ``dirty``."""
        values = raw.values
        n = len(values)
        if n and None not in values:
            present = cast("list[bytes]", values)
            if max(map(len, present)) <= self.spec.max_message_bytes:
                joined = b"\n".join(present)
                if joined.count(b"\n") == n - 1 and b"\r" not in joined:  # the common case, at C speed
                    return present, list(range(n))
        lines: list[bytes] = []
        line_of: list[int] = []
        for i, value in enumerate(values):
            if value is not None and len(value) > self.spec.max_message_bytes:
                dirty[i] = ("oversized", f"bytes={len(value)}")
            elif value is None:
                dirty[i] = ("null_value", None)
            else:
                line = _json_line(value)
                if isinstance(line, str):
                    dirty[i] = ("invalid_json", line)
                else:
                    lines.append(line)
                    line_of.append(i)
        return lines, line_of

    def _rejected_reason(self, line: bytes, error: str) -> tuple[str, str | None]:
        """Reason and detail of a message the JSON reader rejected on its own."""
        try:
            obj = json.loads(line)
        except ValueError as exc:
            return "invalid_json", f"invalid JSON: {exc}"
        if not isinstance(obj, dict):
            return "invalid_json", f"not a JSON object but {type(obj).__name__}"
        if obj.get(self.spec.event_time_field) is None:
            return "null_event_time", None
        missing = [c.name for c in self.columns if not c.nullable and obj.get(c.name) is None]
        if missing:
            return "missing_field", "fields=" + ",".join(missing)
        mismatched = [
            c.name
            for c in self.columns
            if obj.get(c.name) is not None and not self._convertible(c, obj[c.name])
        ]
        if mismatched:
            return "type_mismatch", "fields=" + ",".join(mismatched)
        return "invalid_json", error  # e.g. a key given twice

    def _convertible(self, column: Column, value: Any) -> bool:
        """Whether the JSON reader converts ``value`` alone into the column's type (so the
        fields a detail names are exactly the ones the reader refuses): JSON kinds decide the
        simple types, the reader itself the others."""
        kind = column.type.name
        if kind == "string":
            return isinstance(value, str)
        if kind == "boolean":
            return isinstance(value, bool)
        if kind in INTEGER_BITS:
            bits = INTEGER_BITS[kind]
            return isinstance(value, int) and not isinstance(value, bool) and -(2**bits) <= value < 2**bits
        if kind in {"float", "double"}:
            return isinstance(value, int | float) and not isinstance(value, bool)
        line = json.dumps({column.name: value}, separators=(",", ":")).encode()
        _, rejected = self.column_readers[column.name].read([line])
        if rejected:
            return False
        if column.type.name == "date":
            return _to_date([value]).null_count == 0
        return True

    def _check(
        self, typed: pa.Table, accepted: list[int], raw: RawRecords
    ) -> tuple[pa.Table, dict[int, tuple[str, str | None]]]:
        """Null, future-time and partition-value checks of the rows the reader accepted;
        the good rows get hour labels, ``_late`` and lineage."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        n = typed.num_rows
        columns = {}
        bad_dates: dict[str, pa.Array] = {}
        for c in self.columns:
            col = (
                typed.column(c.name).combine_chunks()
                if n
                else pa.array([], type=self.reader.schema.field(c.name).type)
            )
            if c.type.name == "date":
                converted = _to_date(col)
                bad_dates[c.name] = pc.and_(pc.is_valid(col), pc.is_null(converted))
                col = converted
            columns[c.name] = col
        ts = columns[self.spec.event_time_field]
        masks: list[tuple[str, str, pa.Array]] = []  # (reason, field, bad mask), in reason order
        masks.append(("null_event_time", "", pc.is_null(ts)))
        masks += [
            ("missing_field", c.name, pc.is_null(columns[c.name])) for c in self.columns if not c.nullable
        ]
        masks += [("type_mismatch", name, mask) for name, mask in bad_dates.items()]
        ts_utc = ts.cast(pa.timestamp("us", tz="UTC")) if n else pa.array([], pa.timestamp("us", tz="UTC"))
        limit = pa.scalar(self.future_limit, type=pa.timestamp("us", tz="UTC"))
        masks.append(("future_event_time", "", pc.fill_null(pc.greater(ts_utc, limit), False)))
        for name in self.spec.partition_columns:
            value = columns[name]
            ok = pc.and_(
                pc.match_substring_regex(value, PARTITION_VALUE_PATTERN),
                pc.invert(pc.match_substring(value, "..")),
            )
            masks.append(("invalid_partition_value", name, pc.invert(pc.fill_null(ok, False))))
        any_bad = np.zeros(n, dtype=bool)
        for _, _, mask in masks:
            any_bad |= mask.to_numpy(zero_copy_only=False)
        dirty: dict[int, tuple[str, str | None]] = {}
        bad_rows = np.flatnonzero(any_bad)
        if len(bad_rows):
            flags = {(reason, name): mask.to_numpy(zero_copy_only=False) for reason, name, mask in masks}
            for row in bad_rows.tolist():
                dirty[accepted[row]] = self._reason_of(row, flags)
        keep = np.flatnonzero(~any_bad)
        good_idx = np.asarray(accepted, dtype=np.int64)[keep]
        take = pa.array(keep, type=pa.int64())
        out = {name: col.take(take) for name, col in columns.items()}
        ts_good = ts_utc.take(take)
        dt, hr = self._hour_labels(ts_good)
        if self.sealed_through is not None:
            late = pc.less(ts_good, pa.scalar(self.sealed_through, type=pa.timestamp("us", tz="UTC")))
        else:
            late = pa.array(np.zeros(len(good_idx), dtype=bool))
        out.update(
            dt=dt,
            hr=hr,
            _late=late,
            _mq_partition=pa.array(np.full(len(good_idx), raw.partition, dtype=np.int32)),
            _mq_offset=pa.array(np.asarray(raw.offsets, dtype=np.int64)[good_idx]),
            _mq_timestamp=pa.array(np.asarray(raw.timestamps, dtype=np.int64)[good_idx]),
            _batch_id=pa.array(np.full(len(good_idx), self.spec.batch_id, dtype=np.int64)),
        )
        if self.spec.keep_raw:
            rows = pa.array(good_idx, type=pa.int64())
            out["_raw_key"] = pa.array(raw.keys, type=pa.binary()).take(rows)
            out["_raw_value"] = pa.array(raw.values, type=pa.binary()).take(rows)
        return pa.Table.from_pydict(out, schema=self.good_schema), dirty

    def _reason_of(self, row: int, flags: dict[tuple[str, str], Any]) -> tuple[str, str | None]:
        """The first reason of a row that failed a check, and the fields it names."""
        for reason in REASONS:
            fields = [name for (r, name), mask in flags.items() if r == reason and mask[row]]
            if not fields:
                continue
            if reason == "null_event_time":
                return reason, None
            if reason == "future_event_time":
                return reason, f"limit={self.spec.future_limit}"
            return reason, "fields=" + ",".join(fields)
        raise AssertionError(f"row {row} failed no check")

    def _hour_labels(self, ts: pa.Array) -> tuple[pa.Array, pa.Array]:
        """dt and hr of each instant by :func:`tidemark.hours.hour_of` itself, applied once per
        distinct minute (every zone's offset is whole minutes), so the rule exists once."""
        import pyarrow as pa
        import pyarrow.compute as pc

        minutes = pc.divide(ts.cast(pa.int64()), 60_000_000) if len(ts) else pa.array([], pa.int64())
        distinct = pc.unique(minutes)
        labels = [self._hour_of_minute(m) for m in distinct.to_pylist()]
        index = pc.index_in(minutes, value_set=distinct)
        dt = pa.array([d for d, _ in labels], type=pa.string()).take(index)
        hr = pa.array([h for _, h in labels], type=pa.string()).take(index)
        return dt, hr

    def _hour_of_minute(self, minute: int) -> tuple[str, str]:
        label = self._hours.get(minute)
        if label is None:
            hour = hour_of(datetime.fromtimestamp(minute * 60, UTC), self.spec.time_zone)
            label = self._hours[minute] = (hour.dt, hour.hr)
        return label

    def _dirty_table(self, raw: RawRecords, dirty: dict[int, tuple[str, str | None]]) -> pa.Table:
        import pyarrow as pa

        rows = sorted(dirty)
        n = len(rows)
        return pa.Table.from_pydict(
            {
                "topic": pa.array([self.spec.topic] * n, pa.string()),
                "mq_partition": pa.array([raw.partition] * n, pa.int32()),
                "mq_offset": pa.array([raw.offsets[i] for i in rows], pa.int64()),
                "mq_timestamp": pa.array([raw.timestamps[i] for i in rows], pa.int64()),
                "batch_id": pa.array([self.spec.batch_id] * n, pa.int64()),
                "run_id": pa.array([self.spec.run_id] * n, pa.string()),
                "reason": pa.array([dirty[i][0] for i in rows], pa.string()),
                "detail": pa.array([dirty[i][1] for i in rows], pa.string()),
                "raw_key": pa.array([raw.keys[i] for i in rows], pa.binary()),
                "raw_value": pa.array([raw.values[i] for i in rows], pa.binary()),
            },
            schema=self.dirty_schema,
        )


def _to_date(values: Any) -> pa.Array:
    """``YYYY-MM-DD`` strings -> dates; anything else -> null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    strings = pa.array(values) if not isinstance(values, pa.Array) else values
    if strings.type != pa.string():
        return pa.nulls(len(strings), pa.date32())
    parsed = pc.strptime(strings, format="%Y-%m-%d", unit="s", error_is_null=True)
    return parsed.cast(pa.date32())


# Classified rows as one frame (the Spark paths: data-derived partitions and rebuilds) -------


def classified_schema(spec: ClassifySpec) -> pa.Schema:
    """One row per record: the good schema with raw bytes, plus reason, detail and lineage
    (typed columns are null in dirty rows)."""
    import pyarrow as pa

    return pa.schema([*good_schema(spec, raw=True), *_arrow_fields(VERDICT_FIELDS)])


def classified_ddl(spec: ClassifySpec) -> str:
    """The Spark DDL of :func:`classified_schema` (a data source declares its schema so)."""
    typed = [(f"`{name}`", ddl.removesuffix(" not null")) for name, ddl in spec.columns]
    fields = [*typed, *LINEAGE_FIELDS, *RAW_FIELDS, *VERDICT_FIELDS]
    return ", ".join(f"{name} {ddl}" for name, ddl in fields)


def as_classified(block: Classified, spec: ClassifySpec) -> pa.Table:
    """Good and dirty rows of a block in :func:`classified_schema`."""
    import pyarrow as pa

    schema = classified_schema(spec)
    good = block.good
    n_good = good.num_rows
    columns: dict[str, pa.Array] = {}
    for field in schema:
        if field.name in good.column_names:
            columns[field.name] = good.column(field.name).combine_chunks()
        else:
            columns[field.name] = pa.nulls(n_good, field.type)
    columns["_topic"] = pa.array([spec.topic] * n_good, pa.string())
    columns["_run_id"] = pa.array([spec.run_id] * n_good, pa.string())
    good_part = pa.Table.from_pydict(columns, schema=schema)
    d = block.dirty
    n_dirty = d.num_rows
    dirty_columns = {field.name: pa.nulls(n_dirty, field.type) for field in schema}
    dirty_columns.update(
        _late=pa.array([False] * n_dirty, pa.bool_()),
        _mq_partition=d.column("mq_partition").combine_chunks(),
        _mq_offset=d.column("mq_offset").combine_chunks(),
        _mq_timestamp=d.column("mq_timestamp").combine_chunks(),
        _batch_id=d.column("batch_id").combine_chunks(),
        _raw_key=d.column("raw_key").combine_chunks(),
        _raw_value=d.column("raw_value").combine_chunks(),
        _reason=d.column("reason").combine_chunks(),
        _detail=d.column("detail").combine_chunks(),
        _topic=d.column("topic").combine_chunks(),
        _run_id=d.column("run_id").combine_chunks(),
    )
    return pa.concat_tables([good_part, pa.Table.from_pydict(dirty_columns, schema=schema)])


# Selections of a classified DataFrame --------------------------------------------------------


def good_rows(classified: DataFrame, config: TableConfig) -> DataFrame:
    """Rows of the table: schema columns, MQ lineage columns and the hour partition columns."""
    from pyspark.sql import functions as F

    return classified.where(F.col("_reason").isNull() & ~F.col("_late")).select(*table_columns(config))


def late_rows(classified: DataFrame, config: TableConfig) -> DataFrame:
    """Valid rows of hours sealed before the batch was planned, with the table's columns."""
    from pyspark.sql import functions as F

    return classified.where(F.col("_reason").isNull() & F.col("_late")).select(*table_columns(config))


def table_columns(config: TableConfig) -> list[str]:
    """Column order of the table files: schema, MQ lineage, then partition columns."""
    names = [c.name for c in config.schema_columns if c.name not in config.partitioning.columns]
    return [*names, *META_COLUMNS, *partition_columns(config)]


def partition_columns(config: TableConfig) -> list[str]:
    return [*HOUR_COLUMNS, *config.partitioning.columns]


def dirty_rows(classified: DataFrame) -> DataFrame:
    """Rows of ``<table>__dirty``: raw bytes, reason code and where the record came from."""
    from pyspark.sql import functions as F

    return classified.where(F.col("_reason").isNotNull()).select(
        F.col("_topic").alias("topic"),
        F.col("_mq_partition").alias("mq_partition"),
        F.col("_mq_offset").alias("mq_offset"),
        F.col("_mq_timestamp").alias("mq_timestamp"),
        F.col("_batch_id").alias("batch_id"),
        F.col("_run_id").alias("run_id"),
        F.col("_reason").alias("reason"),
        F.col("_detail").alias("detail"),
        F.col("_raw_key").alias("raw_key"),
        F.col("_raw_value").alias("raw_value"),
    )
