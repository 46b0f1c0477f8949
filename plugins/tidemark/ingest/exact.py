"""Values a table's file format cannot hold so that every documented reader reads them back
exactly (docs/operations.md, "Who reads what"): such a value makes its record dirty with
``unrepresentable_in_<format>`` at classification, so it is never written wrong.

Measured on this stack (tests/integration/test_exact_values.py reads every value back through
Spark's native readers, Spark through Hive's SerDes, and pyarrow):

| limit | formats | why |
|---|---|---|
| a ``date`` or timestamp before 1582-10-15 | both | Hive's readers (2.x, 3.x) and Spark's ORC reader use the hybrid Julian/Gregorian calendar; pyarrow and Spark's Parquet reader the proleptic one: the same stored number is two different days |
| a timestamp before 1970 with a fraction of a second | ORC | Arrow's ORC writer stores a negative nanosecond part that Java's ORC readers refuse (``nanos > 999999999 or < 0``), and Apache ORC itself cannot hold the last second before 1970 (ORC-763) |
| a timestamp outside 1677-09-21T00:12:43.145225 .. 2262-04-11T23:47:16.854775 | ORC | pyarrow's ORC reader returns nanoseconds in 64 bits, and fails on the file |

Checked inside structs, arrays and maps too: one bad element makes its record dirty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import date
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

GREGORIAN_START = date(1582, 10, 15)
_GREGORIAN_DAYS = (GREGORIAN_START - date(1970, 1, 1)).days
_GREGORIAN_MICROS = _GREGORIAN_DAYS * 86_400_000_000
_ORC_LAST_MICROS = (2**63 - 1) // 1000  # pyarrow's ORC reader: nanoseconds in an int64
_ORC_FIRST_MICROS = -(2**63 // 1000)

LIMITS = {  # what the dirty record's detail says, after the column's name
    "calendar": f"before {GREGORIAN_START.isoformat()} (Julian calendar in Hive's readers)",
    "orc_fraction": "a fraction of a second before 1970 (refused by Java's ORC readers)",
    "orc_range": "outside 1677-09-21T00:12:43.145225..2262-04-11T23:47:16.854775 (pyarrow's ORC reader)",
}


def reason_of(table_format: str) -> str:
    return f"unrepresentable_in_{table_format}"


def unrepresentable(columns: dict[str, pa.Array], table_format: str) -> Iterator[tuple[str, pa.Array]]:
    """(``column: limit``, per-row mask) for each column and limit of ``table_format`` that
    some of the column's values break; nothing for a column whose values all hold."""
    import pyarrow as pa

    checks = _checks(table_format)
    for name, column in columns.items():
        if not _temporal(column.type):
            continue
        for limit, check in checks.items():
            mask = _rows_failing(column, check)
            if mask is not None and mask.any():
                yield f"{name}: {LIMITS[limit]}", pa.array(mask)


def _temporal(kind: pa.DataType) -> bool:
    """The type is, or holds, a date or a timestamp."""
    import pyarrow as pa

    if pa.types.is_date(kind) or pa.types.is_timestamp(kind):
        return True
    if pa.types.is_map(kind):
        return _temporal(kind.key_type) or _temporal(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _temporal(kind.value_type)
    if pa.types.is_struct(kind):
        return any(_temporal(kind.field(i).type) for i in range(kind.num_fields))
    return False


def _checks(table_format: str) -> dict[str, Callable[[pa.Array], np.ndarray | None]]:
    checks: dict[str, Callable[[pa.Array], np.ndarray | None]] = {"calendar": _before_gregorian}
    if table_format == "orc":
        checks["orc_fraction"] = _orc_fraction
        checks["orc_range"] = _orc_range
    return checks


def _micros(array: pa.Array) -> np.ndarray | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_timestamp(array.type):
        return None
    unit = array.type.unit
    scale = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": 1}[unit]
    values = pc.fill_null(array.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    return values // 1000 if unit == "ns" else values * scale


def _before_gregorian(array: pa.Array) -> np.ndarray | None:
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_date32(array.type):
        days = pc.fill_null(array.cast(pa.int32()), 0).to_numpy(zero_copy_only=False)
        return days < _GREGORIAN_DAYS
    micros = _micros(array)
    return None if micros is None else micros < _GREGORIAN_MICROS


def _orc_fraction(array: pa.Array) -> np.ndarray | None:
    micros = _micros(array)
    return None if micros is None else (micros < 0) & (micros % 1_000_000 != 0)


def _orc_range(array: pa.Array) -> np.ndarray | None:
    micros = _micros(array)
    return None if micros is None else (micros < _ORC_FIRST_MICROS) | (micros > _ORC_LAST_MICROS)


def _rows_failing(array: pa.Array, check: Callable[[pa.Array], np.ndarray | None]) -> np.ndarray | None:
    """A bool per row: the row's value, or any value nested in it, fails ``check``; None
    when the type holds no value ``check`` judges."""
    import numpy as np
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    n = len(array)
    valid = array.is_valid().to_numpy(zero_copy_only=False) if array.null_count else np.ones(n, bool)
    kind = array.type
    if pa.types.is_struct(kind):
        masks = [_rows_failing(array.field(i), check) for i in range(kind.num_fields)]
        found = [m for m in masks if m is not None]
        return np.logical_or.reduce(found) & valid if found else None
    if pa.types.is_map(kind):  # a list of (key, value) structs
        array = pa.ListArray.from_arrays(array.offsets, array.values)
        kind = array.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        flat = _rows_failing(array.flatten(), check)
        return None if flat is None else _per_parent(array, flat, n) & valid
    mask = check(array)
    return None if mask is None else mask & valid


def _per_parent(array: pa.Array, child_mask: np.ndarray, n: int) -> np.ndarray:
    """A list's (or map's) rows that hold at least one failing element."""
    import numpy as np
    import pyarrow.compute as pc

    out = np.zeros(n, dtype=bool)
    parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
    out[parents[child_mask]] = True
    return out
