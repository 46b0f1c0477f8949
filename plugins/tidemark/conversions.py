"""Declared conversions: what producers really send, turned into the YAML schema's types.

The schema (Spark SQL types) stays the contract; ``source.conversions`` says, per column, that
the message carries it in another shape:

| ``from`` | message value | column types | example |
|---|---|---|---|
| ``epoch_seconds`` / ``epoch_millis`` / ``epoch_micros`` | a JSON number (fractions allowed) | timestamp, timestamp_ntz | ``1732269600000`` |
| ``text`` with ``format`` (and ``zone``, default UTC) | a string in a ``strptime`` format, in that zone | timestamp, timestamp_ntz, date | ``22/11/2026 10:00`` |
| ``text`` without ``format`` | a number written as a string | the numeric types | ``"12.50"`` |

A conversion that cannot hold for its column's type is refused when the config loads, naming
the column; a value that does not convert is a dirty ``type_mismatch`` naming the field. The
conversions are part of the recorded schema version (``evolution.SchemaVersion``), so a rebuild
or replay of a batch decodes it as its first run did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field

from tidemark.schema import TIMESTAMP_TYPES, Column

if TYPE_CHECKING:
    import pyarrow as pa

EPOCH_UNITS = {"epoch_seconds": 1_000_000, "epoch_millis": 1_000, "epoch_micros": 1}
NUMERIC_TYPES = {"tinyint", "smallint", "int", "bigint", "float", "double", "decimal"}
# an instant further than this from 1970 in microseconds does not fit Spark's timestamp
MAX_MICROS = 253402300799999999  # 9999-12-31T23:59:59.999999Z


class Conversion(BaseModel):
    """How one column arrives in the messages (see the module's table)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    source: Literal["epoch_seconds", "epoch_millis", "epoch_micros", "text"] = Field(alias="from")
    format: str | None = None
    zone: str = "UTC"

    def describe(self) -> str:
        """A canonical one-line form (recorded in schema versions, carried to the tasks)."""
        if self.source != "text" or self.format is None:
            return self.source
        return f"text|{self.format}|{self.zone}"

    @classmethod
    def parse(cls, described: str) -> Conversion:
        source, _, rest = described.partition("|")
        if not rest:
            return cls.model_validate({"from": source})
        fmt, _, zone = rest.rpartition("|")
        return cls.model_validate({"from": source, "format": fmt, "zone": zone})

    def problem(self, column: Column) -> str | None:
        """Why this conversion cannot produce the column's type, or None."""
        kind = column.type.name
        if self.source in EPOCH_UNITS:
            if kind not in TIMESTAMP_TYPES:
                return f"{self.source} gives a timestamp, but {column.name!r} is {column.type.ddl()}"
            return None
        if self.format is not None:
            if kind not in TIMESTAMP_TYPES | {"date"}:
                return (
                    f"a formatted time gives a timestamp or date, but {column.name!r} is {column.type.ddl()}"
                )
            try:
                ZoneInfo(self.zone)
            except (ZoneInfoNotFoundError, ValueError):
                return f"unknown time zone {self.zone!r} for {column.name!r}"
            return None
        if kind not in NUMERIC_TYPES:
            return (
                f"text without a format is a number as a string, but {column.name!r} is {column.type.ddl()}"
            )
        return None


def conversion_problems(columns: dict[str, Column], conversions: dict[str, Conversion]) -> list[str]:
    """Config validation: every conversion names a column whose type it can produce."""
    problems = []
    for name, conversion in conversions.items():
        column = columns.get(name)
        if column is None:
            problems.append(f"source.conversions: {name!r} is not a column of the schema")
        elif (why := conversion.problem(column)) is not None:
            problems.append(f"source.conversions: {why}")
    return problems


def source_type(conversion: Conversion) -> pa.DataType:
    """What the decoder reads the field as before converting it."""
    import pyarrow as pa

    return pa.float64() if conversion.source in EPOCH_UNITS else pa.string()


def convert(values: pa.Array, conversion: Conversion, column: Column) -> tuple[pa.Array, pa.Array]:
    """The column's values converted, and the mask of values given but not convertible."""
    import pyarrow.compute as pc

    target = column.type.to_arrow()
    if conversion.source in EPOCH_UNITS:
        converted = _from_epoch(values, EPOCH_UNITS[conversion.source], target)
    elif conversion.format is not None:
        converted = _from_format(values, conversion.format, conversion.zone, target)
    else:
        converted = _cast_each(values, target)
    return converted, pc.and_(pc.is_valid(values), pc.is_null(converted))


def _from_epoch(values: pa.Array, micros_per_unit: int, target: pa.DataType) -> pa.Array:
    import numpy as np
    import pyarrow as pa

    numbers = values.to_numpy(zero_copy_only=False).astype(np.float64)  # nulls are NaN
    micros = np.round(numbers * micros_per_unit)
    fits = np.isfinite(micros) & (np.abs(micros) <= MAX_MICROS)
    as_int = np.where(fits, micros, 0).astype(np.int64)
    out = pa.array(as_int, type=pa.int64(), mask=~fits).cast(pa.timestamp("us", tz="UTC"))
    return out.cast(target)


def _from_format(values: pa.Array, fmt: str, zone: str, target: pa.DataType) -> pa.Array:
    import pyarrow as pa
    import pyarrow.compute as pc

    local = pc.strptime(values, format=fmt, unit="us", error_is_null=True)
    if pa.types.is_date32(target):  # the date as written
        return pc.cast(local, pa.date32())
    if target.tz is None:  # timestamp_ntz: the wall time as written
        return local
    instant = pc.assume_timezone(local, timezone=zone, ambiguous="earliest", nonexistent="earliest")
    return instant.cast(target)


def _cast_each(values: pa.Array, target: pa.DataType) -> pa.Array:
    """Strings to a numeric type; a value that does not parse (or does not fit) becomes null.
    One vectorised cast; value by value only for a block holding a bad one."""
    import pyarrow as pa

    try:
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out = []
    for value in values.to_pylist():
        try:
            out.append(pa.array([value], pa.string()).cast(target)[0].as_py() if value is not None else None)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out.append(None)
    return pa.array(out, type=target)
