"""The messages of one Avro writer schema decoded in one vectorised call, where that can be
proved exact.

A Confluent message body is exactly one Avro datum, so the bodies of one writer schema,
wrapped in a synthesized container (a header naming the writer schema, the null codec, one
block holding every body), are read by a columnar Avro reader (polars' ``read_avro``, Rust) in
one call: ~0.5 us a record against ~10 us for a Python dict per record from fastavro.

A corrupt body desynchronises the block: the records after it are read from the wrong bytes.
The reader does not say where each record ended, so the block is accepted only when it can
vouch for every boundary: every record's *encoded size*, computed back from its decoded
values (Avro's binary encoding is a function of the values: zig-zag varints, length-prefixed
strings, one branch index per union, arrays in one block), equals its message's length. A
record read from the wrong bytes, with trailing bytes, or truncated fails that test (or the
read itself), and the caller decodes the block record by record as before, which names the
poison message. An encoding the writer may legally vary (padded varints, arrays in several
blocks) also fails it: slower, never wrong.

One difference outside the spec: a boolean byte other than 0 or 1 reads as false here (as
Java's Avro reads it) and as true in fastavro; the property test compares the two paths on
everything else, corrupted messages' verdicts included.

The reader knows no reader schema: ``conform`` puts its columns into the Arrow types the
per-record path gives (``avro_schema.ReadPlan.sources``); the table's resolution rules run on
both paths' output alike. Writer schemas the reader cannot take (maps, unions of several
types, decimals over 38 digits) are never tried.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

from tidemark.avro_schema import named_types
from tidemark.ingest.decoders.binary import varint

log = logging.getLogger(__name__)

SYNC = b"tidemark-avro-bk"  # 16 bytes: the container's sync marker
_LOGICAL_SKIPPED = {"timestamp-nanos", "local-timestamp-nanos"}  # the reader gives their longs


class NotVectorisable(ValueError):
    """A writer schema the columnar reader cannot take, or whose sizes cannot be computed."""


def container(schema_text: str, bodies: Sequence[bytes]) -> bytes:
    """An Avro object container file: the writer schema, the null codec, one block of
    ``bodies`` (each one datum)."""
    meta = {"avro.schema": schema_text.encode(), "avro.codec": b"null"}
    header = bytearray(b"Obj\x01") + varint(len(meta))
    for key, value in meta.items():
        header += varint(len(key)) + key.encode() + varint(len(value)) + value
    header += varint(0) + SYNC
    data = b"".join(bodies)
    return bytes(header) + varint(len(bodies)) + varint(len(data)) + data + SYNC


def screen(writer: Any) -> dict[str, Any]:
    """The writer schema's named types (``avro_schema.named_types``), or
    :class:`NotVectorisable` for what the reader cannot take."""
    _walk(writer)
    return named_types(writer)


def _walk(schema: Any) -> None:
    if isinstance(schema, str):
        return
    if isinstance(schema, list):
        if len([b for b in schema if b != "null"]) != 1 or len(schema) > 2:
            raise NotVectorisable("a union of several types")
        for branch in schema:
            _walk(branch)
        return
    if not isinstance(schema, dict):
        raise NotVectorisable(f"unexpected schema {schema!r}"[:80])
    kind = schema.get("type")
    if isinstance(kind, dict | list):
        _walk(kind)
        return
    logical = schema.get("logicalType")
    if kind == "map":
        raise NotVectorisable("a map")
    if logical == "decimal" and int(schema.get("precision", 0)) > 38:
        raise NotVectorisable("a decimal of more than 38 digits")
    if logical == "uuid" and kind == "fixed":
        raise NotVectorisable("a uuid in a fixed")
    if kind in ("record", "error"):
        for field in schema.get("fields", []):
            _walk(field["type"])
    elif kind == "array":
        _walk(schema["items"])


def decode_records(schema_text: str, bodies: Sequence[bytes]) -> pa.Table | None:
    """The records of ``bodies`` (one writer schema's) as one Arrow table, columns as the
    reader gives them; None where the block fails or cannot vouch for every boundary (the
    caller decodes record by record)."""
    import numpy as np

    try:
        writer = json.loads(schema_text)
        names = screen(writer)
    except (ValueError, KeyError, TypeError):
        return None
    try:
        table = read_container(container(schema_text, bodies))
    except BaseException as exc:  # polars raises, or panics (a BaseException) on what it lacks
        if isinstance(exc, KeyboardInterrupt | SystemExit | MemoryError):
            raise
        log.debug("vectorised Avro read refused (%s): record by record", exc)
        return None
    if table.num_rows != len(bodies):
        return None
    try:
        sizes = record_sizes(table, _resolve(writer, names), names)
    except NotVectorisable as exc:
        log.debug("vectorised Avro sizes unknown (%s): record by record", exc)
        return None
    lengths = np.fromiter((len(b) for b in bodies), dtype=np.int64, count=len(bodies))
    if not np.array_equal(sizes, lengths):
        return None
    return table


def read_container(data: bytes) -> pa.Table:
    """An Avro container file read by polars' reader. Its native extension alone imports in
    ~10 ms, the polars package around it in ~1 s, in every Python worker of every job; so the
    extension's reader is called directly where its layout is the one pinned (requirements.txt;
    the tests of this module read through it), the package's public ``read_avro`` otherwise."""
    import pyarrow as pa

    try:
        from _polars_runtime_32._polars_runtime import PyDataFrame
    except ImportError:
        PyDataFrame = None
    if PyDataFrame is not None and hasattr(PyDataFrame, "read_avro") and hasattr(PyDataFrame, "to_arrow"):
        frame = PyDataFrame.read_avro(io.BytesIO(data), None, None, None)
        return pa.Table.from_batches(frame.to_arrow(False))  # compat level False: large_string, not views
    import polars as pl

    return pl.read_avro(io.BytesIO(data)).to_arrow()


def record_sizes(table: pa.Table, record: dict[str, Any], names: dict[str, Any]) -> np.ndarray:
    """The encoded size of every row of ``table`` under the writer's top-level record."""
    import numpy as np

    total = np.zeros(table.num_rows, dtype=np.int64)
    for field in record.get("fields", []):
        if field["name"] not in table.column_names:
            raise NotVectorisable(f"field {field['name']} missing from the read")
        total += sizes(table.column(field["name"]).combine_chunks(), field["type"], names)
    return total


def sizes(array: pa.Array, schema: Any, names: dict[str, Any]) -> np.ndarray:
    """The encoded size of each value of ``array`` (written with ``schema``)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _resolve(schema, names)
    n = len(array)
    if isinstance(schema, list):  # [null, T] in either order: the branch index, then T
        branch = next(b for b in schema if b != "null")
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        inner = sizes(array, branch, names)
        return 1 + np.where(valid, inner, 0)
    kind = schema if isinstance(schema, str) else schema.get("type")
    if isinstance(kind, dict | list):
        return sizes(array, kind, names)
    logical = None if isinstance(schema, str) else schema.get("logicalType")
    if kind == "null":
        return np.zeros(n, dtype=np.int64)
    if kind == "boolean":
        return np.ones(n, dtype=np.int64)
    if kind == "float":
        return np.full(n, 4, dtype=np.int64)
    if kind == "double":
        return np.full(n, 8, dtype=np.int64)
    if kind == "fixed":
        return np.full(n, int(schema["size"]), dtype=np.int64)
    if kind in ("int", "long"):
        return _varint_sizes(_integers(array, logical))
    if kind in ("string", "bytes") and logical == "decimal":
        return _decimal_sizes(array, int(schema.get("scale", 0)))
    if kind in ("string", "bytes"):
        lengths = _integers(pc.binary_length(array), None)
        return _varint_sizes(lengths) + lengths
    if kind == "enum":
        symbols = pa.array(schema["symbols"], pa.string())
        index = pc.index_in(array.cast(pa.string()) if pa.types.is_dictionary(array.type) else array, symbols)
        return _varint_sizes(_integers(index, None))
    if kind in ("record", "error"):
        total = np.zeros(n, dtype=np.int64)
        flat = array.flatten() if isinstance(array, pa.StructArray) else None
        if flat is None:
            raise NotVectorisable(f"a record read as {array.type}")
        by_name = {array.type.field(i).name: flat[i] for i in range(array.type.num_fields)}
        for field in schema.get("fields", []):
            if field["name"] not in by_name:
                raise NotVectorisable(f"field {field['name']} missing from the read")
            total += sizes(by_name[field["name"]], field["type"], names)
        return total
    if kind == "array":
        if not isinstance(array, pa.ListArray | pa.LargeListArray):
            raise NotVectorisable(f"an array read as {array.type}")
        offsets = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        counts = np.diff(offsets)
        items = sizes(array.values, schema["items"], names)
        sums = np.concatenate([[0], np.cumsum(items)])
        inside = sums[offsets[1:]] - sums[offsets[:-1]]
        # one block of the items, then the empty block that ends the array
        return np.where(counts > 0, _varint_sizes(counts) + inside + 1, 1)
    raise NotVectorisable(f"no encoded size for {json.dumps(schema)[:80]}")


def _resolve(schema: Any, names: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema not in {
        "null", "boolean", "int", "long", "float", "double", "bytes", "string",
    }:  # fmt: skip
        found = names.get(schema) or names.get(schema.rsplit(".", 1)[-1])
        if found is None:
            raise NotVectorisable(f"unknown named type {schema!r}")
        return found
    return schema


def _integers(array: pa.Array, logical: str | None) -> np.ndarray:
    """The longs an int/long column was written as (nulls as 0: their size is masked)."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_time(array.type):  # the reader gives nanoseconds of the day
        per = {"time-millis": 1_000_000, "time-micros": 1_000}.get(logical or "")
        if per is None:
            raise NotVectorisable(f"a time of logical type {logical}")
        nanos = array.cast(pa.time64("ns")).cast(pa.int64()).fill_null(0)
        return np.asarray(nanos.to_numpy(zero_copy_only=False), dtype=np.int64) // per
    if pa.types.is_timestamp(array.type) or pa.types.is_date(array.type):
        unit_of = {"timestamp-millis": "ms", "timestamp-micros": "us", "local-timestamp-millis": "ms"}
        unit_of |= {"local-timestamp-micros": "us"}
        if pa.types.is_timestamp(array.type) and array.type.unit != unit_of.get(logical or ""):
            raise NotVectorisable(f"a {logical} read as {array.type}")
        width = pa.int64() if pa.types.is_timestamp(array.type) else pa.int32()
        array = array.cast(width)
    values = array.cast(pa.int64()).fill_null(0)
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """The length of each value's zig-zag varint."""
    import numpy as np

    zigzag = (values.astype(np.int64) << 1) ^ (values.astype(np.int64) >> 63)
    unsigned = zigzag.view(np.uint64)
    out = np.ones(len(values), dtype=np.int64)
    for bits in range(7, 64, 7):
        out += unsigned >= (np.uint64(1) << np.uint64(bits))
    return out


def _decimal_sizes(array: pa.Array, scale: int) -> np.ndarray:
    """A decimal in bytes: the length prefix and the unscaled value's two's complement in the
    fewest bytes (as every Avro library writes it), read from the 128-bit words themselves."""
    import numpy as np
    import pyarrow as pa

    if not pa.types.is_decimal128(array.type):
        raise NotVectorisable(f"a decimal read as {array.type}")
    words = np.frombuffer(array.buffers()[1], dtype="<i8").reshape(-1, 2)[
        array.offset : array.offset + len(array)
    ]
    low, high = words[:, 0], words[:, 1]
    fits = high == (low >> 63)  # the value is a long: its bytes are the low word's
    out = np.where(fits, _twos_complement_bytes(low), 8 + _twos_complement_bytes(high))
    out = np.where(np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool), out, 0)
    return _varint_sizes(out) + out


def _twos_complement_bytes(values: np.ndarray) -> np.ndarray:
    """The fewest bytes of each long in two's complement (Java's ``BigInteger.toByteArray``)."""
    import numpy as np

    magnitude = np.where(values < 0, ~values, values)  # the bits besides the sign
    out = np.ones(len(values), dtype=np.int64)
    for bits in range(7, 63, 8):
        out += magnitude >= (np.int64(1) << np.int64(bits))
    return out


def conform(array: pa.Array, target: pa.DataType) -> pa.Array:
    """A column as the reader gave it, in ``target`` (the type the per-record path builds it
    in): large types narrowed, dictionaries decoded, struct fields matched by name (a field
    the writer lacks is null), longs of nanosecond timestamps as timestamps."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_struct(target):
        if not pa.types.is_struct(array.type):
            raise NotVectorisable(f"a struct read as {array.type}")
        flat = array.flatten()
        by_name = {array.type.field(i).name: flat[i] for i in range(array.type.num_fields)}
        children = [
            conform(by_name[f.name], f.type) if f.name in by_name else pa.nulls(len(array), f.type)
            for f in target
        ]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if pa.types.is_list(target) or pa.types.is_large_list(target):
        if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
            raise NotVectorisable(f"a list read as {array.type}")
        values = conform(array.values, target.value_type)
        offsets = array.offsets.cast(pa.int32() if pa.types.is_list(target) else pa.int64())
        return type(pa.array([], target)).from_arrays(offsets, values, type=target, mask=array.is_null())
    return array.cast(target)
