"""What the binary formats (Avro, Protobuf) share: the Confluent wire format's header, the
typing of one writer schema's values into a column, and the assembly of the groups of
records (one per writer schema) back into record order."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tidemark.conversions import Conversion, convert
from tidemark.ingest.decoders.base import Decoded, RecordGroup, Verdict
from tidemark.schema import Column

if TYPE_CHECKING:
    import pyarrow as pa

MAGIC = 0
HEADER_BYTES = 5
Group = tuple[list[int], dict[str, tuple["pa.Array", "pa.Array"]]]  # records, column -> (values, unfit)


def confluent_header(value: bytes) -> tuple[int, bytes] | tuple[str, str]:
    """The schema id and the rest of a framed message, or why it is not framed."""
    if len(value) < HEADER_BYTES or value[0] != MAGIC:
        why = "no magic byte 0" if value[:1] != bytes([MAGIC]) else f"{len(value)} bytes, header is 5"
        return "bad_framing", f"{why} (first bytes {value[:8].hex()})"
    return int.from_bytes(value[1:HEADER_BYTES], "big"), value[HEADER_BYTES:]


def varint(n: int) -> bytes:
    """The zig-zag varint of a long, as Avro writes every int and long (and Confluent's
    Protobuf framing its message indexes)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def typed_column(
    values: list[Any], source: pa.DataType | None, column: Column, conversion: Conversion | None
) -> tuple[pa.Array, pa.Array]:
    """One writer schema's values of a column (in ``source``, its Arrow type; None: the
    writer lacks it) in the table's type, and the mask of values that could not be converted."""
    import pyarrow as pa

    array = pa.array(values, type=source) if source is not None else None
    return typed_array(array, len(values), column, conversion)


def typed_records(
    group: RecordGroup,
    columns: list[Column],
    conversions: dict[str, Conversion],
    source: Callable[[str], pa.DataType | None],
) -> Group:
    """One writer schema's records (dicts of the column names' values) in the table's types,
    each column read as ``source(column)`` gives its Arrow type in the writer."""
    typed = {
        c.name: typed_column(
            [r.get(c.name) for r in group.records], source(c.name), c, conversions.get(c.name)
        )
        for c in columns
    }
    return group.rows, typed


def typed_array(
    array: pa.Array | None, n: int, column: Column, conversion: Conversion | None
) -> tuple[pa.Array, pa.Array]:
    """:func:`typed_column` of values already in their Arrow type (None: ``n`` rows of a
    column the writer lacks)."""
    import pyarrow as pa

    if array is None:
        return pa.nulls(n, column.type.to_arrow()), pa.array([False] * n, pa.bool_())
    if conversion is not None:
        return convert(array, conversion, column)
    return cast_each(array, column.type.to_arrow())


def cast_each(values: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """``values`` cast to ``target`` (one cast), and the mask of values that do not fit
    (an int into a tinyint, a nanosecond timestamp out of range): value by value only then."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        # nanoseconds lose their last digits (Spark keeps microseconds); nothing else is cut
        truncating = pa.types.is_timestamp(values.type) and values.type.unit == "ns"
        out = values.cast(target, safe=not truncating)
        return out, pa.array([False] * len(values), pa.bool_())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
        pass
    cast = []
    for i in range(len(values)):
        try:
            cast.append(values.slice(i, 1).cast(target)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
            cast.append(None)
    out = pa.array(cast, type=target)
    return out, pc.and_(pc.is_valid(values), pc.is_null(out))


def assemble(columns: list[Column], groups: list[Group], rejected: dict[int, Verdict]) -> Decoded:
    """The groups' columns concatenated and put back in record order."""
    import numpy as np
    import pyarrow as pa

    accepted = [i for rows, _ in groups for i in rows]
    order = pa.array(np.argsort(np.asarray(accepted, dtype=np.int64), kind="stable"))
    typed: dict[str, pa.Array] = {}
    unfit: dict[str, pa.Array] = {}
    for column in columns:
        if not accepted:
            typed[column.name] = pa.array([], column.type.to_arrow())
            unfit[column.name] = pa.array([], pa.bool_())
            continue
        typed[column.name] = pa.concat_arrays([g[column.name][0] for _, g in groups]).take(order)
        unfit[column.name] = pa.concat_arrays([g[column.name][1] for _, g in groups]).take(order)
    return Decoded(typed, sorted(accepted), unfit, rejected)


def of(schema_id: int | None) -> str:
    """A verdict's prefix naming the writer schema."""
    return f"schema_id={schema_id}: " if schema_id is not None else ""
