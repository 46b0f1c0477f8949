"""``pyarrow.json`` over lines of messages, narrowing a rejected block down to the records at
fault: one bad record costs a few small re-reads, never the block.

One message is one record, never more, never fewer: the reader gets only lines that start
with ``{`` and end with ``}`` (so no line is empty and every line yields at least one row), a
piece is accepted only when it yields exactly one row per line, and a line the reader's error
names is set aside only once it fails on its own (a message holding two objects, or trailing
data, shifts the reader's row numbers).
"""

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

    def _fails_alone(self, line: bytes) -> bool:
        import pyarrow as pa

        try:
            return bool(self._read([line]).num_rows != 1)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return True

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
            if 0 <= row < len(index) and self._fails_alone(lines[index[row]]):
                # the reader named the line and it fails on its own: set it aside, read the rest
                rejected[index[row]] = error
                index = index[:row] + index[row + 1 :]
                continue
            middle = len(index) // 2
            self._narrow(lines, index[:middle], tables, rejected)
            index = index[middle:]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (NaN and Infinity literals are refused)")


def strict_json(text: bytes) -> Any:
    """The value of one JSON document by the standard: no NaN/Infinity literals, no trailing
    data; ``ValueError`` says why not (``RecursionError`` of deep nesting included)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def message_line(value: bytes) -> bytes | str:
    """The message as one JSON-object line for the reader, or why it is not exactly one JSON
    object (empty, invalid UTF-8, several objects, trailing data, not an object, NaN).

    A message with line breaks (pretty-printed JSON) is re-serialized on one line; a line
    break inside a string is not valid JSON, which the parser reports."""
    stripped = value.strip()
    if not stripped:
        return "empty message"
    try:
        stripped.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at byte {exc.start}"
    multiline = b"\n" in stripped or b"\r" in stripped
    framed = stripped[:1] == b"{" and stripped[-1:] == b"}"
    if framed and not multiline and b"NaN" not in stripped and b"Infinity" not in stripped:
        return stripped  # the reader decides (several objects on the line: it yields two rows)
    try:
        obj = strict_json(stripped)
    except ValueError as exc:
        return f"invalid JSON: {exc}"
    if not isinstance(obj, dict):
        return f"not a JSON object but {type(obj).__name__}"
    return json.dumps(obj, separators=(",", ":")).encode() if multiline else stripped


def plain_block(joined: bytes, n: int) -> bool:
    """Whether ``n`` messages joined by line breaks are each one line that starts with ``{``
    and ends with ``}``, valid UTF-8, without NaN/Infinity: checked over the whole block at C
    speed (the line framing with numpy: two-byte ``bytes.count`` scans cost 2.5 ms a block),
    so the common block goes to the reader as it is."""
    import numpy as np

    if joined[:1] != b"{" or joined[-1:] != b"}" or b"\r" in joined:
        return False
    data = np.frombuffer(joined, dtype=np.uint8)
    breaks = np.flatnonzero(data == 0x0A)
    if len(breaks) != n - 1:
        return False
    if not (np.all(data[breaks + 1] == 0x7B) and np.all(data[breaks - 1] == 0x7D)):  # "\n{" and "}\n"
        return False
    if b"NaN" in joined or b"Infinity" in joined:
        return False
    if not joined.isascii():
        try:
            joined.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


def to_date(values: Any) -> pa.Array:
    """``YYYY-MM-DD`` strings -> dates; anything else -> null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    strings = pa.array(values) if not isinstance(values, pa.Array) else values
    if strings.type != pa.string():
        return pa.nulls(len(strings), pa.date32())
    parsed = pc.strptime(strings, format="%Y-%m-%d", unit="s", error_is_null=True)
    return parsed.cast(pa.date32())
