"""``pyarrow.json`` over lines of messages, narrowing a rejected block down to the records at
fault: one bad record costs a few small re-reads, never the block."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from tidemark.schema import Column

# A rejected block is re-read in pieces of at most this many records; within a piece the row
# the reader names is set aside and the rest re-read.
PARSE_PIECE = 256
_ERROR_ROW = re.compile(r" in row (\d+)$")


def parse_schema(columns: list[Column]) -> pa.Schema:
    """What the JSON reader is asked for: the table's types, but top-level dates as strings
    (the reader reads dates from day numbers only)."""
    import pyarrow as pa

    return pa.schema(
        [pa.field(c.name, pa.string() if c.type.name == "date" else c.type.to_arrow()) for c in columns]
    )


class JsonLinesReader:
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


def json_line(value: bytes) -> bytes | str:
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


def to_date(values: Any) -> pa.Array:
    """``YYYY-MM-DD`` strings -> dates; anything else -> null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    strings = pa.array(values) if not isinstance(values, pa.Array) else values
    if strings.type != pa.string():
        return pa.nulls(len(strings), pa.date32())
    parsed = pc.strptime(strings, format="%Y-%m-%d", unit="s", error_is_null=True)
    return parsed.cast(pa.date32())
