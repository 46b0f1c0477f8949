"""JSON messages: one JSON object per message, parsed in Arrow inside the read tasks.

``pyarrow.json`` reads a block of messages against the table schema in C++, which costs a
fifth of the CPU of Spark's ``from_json`` + casts (docs/benchmarks.md). A block the reader
rejects is re-read in pieces down to the records at fault, so one bad record costs a few small
re-reads, never the block.

Typing is strict, as the JSON reader is: a JSON string is not a number, a number is not a
string, a decimal with more places than its scale is not rounded. Timestamps are ISO 8601
strings (``2026-11-22T10:00:00Z``, ``2026-11-22 10:00:00+01:00``; no offset means UTC);
dates are ``YYYY-MM-DD`` strings; decimals are numbers or numeric strings.

Reasons of its own: ``invalid_json`` (not exactly one JSON object: empty, several objects,
trailing data, not an object, invalid UTF-8, ``NaN``/``Infinity`` literals, a key given twice,
nesting deeper than the parser allows); a record the reader refuses for one field is
``null_event_time``, ``missing_field`` or ``type_mismatch`` naming the fields, as the
classifier's checks would.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tidemark.conversions import Conversion, convert, source_type
from tidemark.envelopes import strict_json_record
from tidemark.ingest.decoders.base import Decoded, RecordGroup, Records, Verdict
from tidemark.ingest.jsonlines import (
    JsonLinesReader,
    message_line,
    parse_schema,
    plain_block,
    strict_json,
    to_date,
)
from tidemark.schema import Column

if TYPE_CHECKING:
    import pyarrow as pa

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # one, not one a record
INTEGER_BITS = {"tinyint": 7, "smallint": 15, "int": 31, "bigint": 63}


class JsonDecoder:
    """One per task: it keeps the JSON readers (the block's, and one per column to name the
    fields of a rejected record)."""

    def __init__(
        self, columns: list[Column], event_time_field: str, conversions: dict[str, Conversion]
    ) -> None:
        import pyarrow as pa

        self.columns = columns
        self.event_time_field = event_time_field
        self.conversions = conversions
        schema = parse_schema(columns)
        for name, conversion in conversions.items():  # read as sent, converted after
            schema = schema.set(schema.get_field_index(name), pa.field(name, source_type(conversion)))
        self.reader = JsonLinesReader(schema)
        self.column_readers = {
            c.name: JsonLinesReader(pa.schema([self.reader.schema.field(c.name)])) for c in columns
        }

    def decode(self, values: Sequence[bytes], index: Sequence[int]) -> Decoded:
        import pyarrow as pa

        rejected: dict[int, Verdict] = {}
        lines, line_of = self._lines(values, index, rejected)
        pieces, refused = self.reader.read(lines)
        for line, error in refused.items():
            rejected[line_of[line]] = self._rejected_reason(lines[line], error)
        accepted = [line_of[i] for piece, _ in pieces for i in piece]
        typed = pa.concat_tables([t for _, t in pieces]) if pieces else self.reader.schema.empty_table()
        columns: dict[str, pa.Array] = {}
        mismatched: dict[str, pa.Array] = {}
        for c in self.columns:
            col = (
                typed.column(c.name).combine_chunks()
                if typed.num_rows
                else pa.array([], type=self.reader.schema.field(c.name).type)
            )
            if c.name in self.conversions:  # declared: epoch numbers, formatted times, numeric strings
                col, mismatched[c.name] = convert(col, self.conversions[c.name], c)
            elif c.type.name == "date":  # read as strings: the reader takes dates from day numbers only
                import pyarrow.compute as pc

                converted = to_date(col)
                mismatched[c.name] = pc.and_(pc.is_valid(col), pc.is_null(converted))
                col = converted
            columns[c.name] = col
        return Decoded(columns, accepted, mismatched, rejected)

    def records(self, values: Sequence[bytes], index: Sequence[int]) -> Records:
        """Each message parsed by the standard (one group): what an envelope unwraps."""
        group = RecordGroup(None, [], [])
        rejected: dict[int, Verdict] = {}
        for i, value in zip(index, values, strict=True):
            parsed = strict_json_record(value)
            if isinstance(parsed, tuple):
                rejected[i] = parsed
            else:
                group.rows.append(i)
                group.records.append(parsed)
        return Records([group], rejected)

    def typed(self, records: Records) -> Decoded:
        """Flat records typed by the same reader and rules as plain messages (one C++ pass
        over the rows written back as JSON lines: typing them in Python would be a second set
        of rules to keep equal to the reader's)."""
        rows = [i for g in records.groups for i in g.rows]
        lines = [_ENCODER.encode(r).encode() for g in records.groups for r in g.records]
        decoded = self.decode(lines, rows)
        decoded.rejected.update(records.rejected)
        return decoded

    def _lines(
        self, values: Sequence[bytes], index: Sequence[int], rejected: dict[int, Verdict]
    ) -> tuple[list[bytes], list[int]]:
        """The messages the JSON reader gets, one per line, and the record of each line; the
        others (not one JSON object on one line) get their reason in ``rejected``."""
        if values and plain_block(b"\n".join(values), len(values)):
            return list(values), list(index)  # the common case, checked at C speed
        lines: list[bytes] = []
        line_of: list[int] = []
        for i, value in zip(index, values, strict=True):
            line = message_line(value)
            if isinstance(line, str):
                rejected[i] = ("invalid_json", line)
            else:
                lines.append(line)
                line_of.append(i)
        return lines, line_of

    def _rejected_reason(self, line: bytes, error: str) -> Verdict:
        """Reason and detail of a message the JSON reader rejected on its own."""
        try:
            obj = strict_json(line)
        except ValueError as exc:
            return "invalid_json", f"invalid JSON: {exc}"
        if not isinstance(obj, dict):
            return "invalid_json", f"not a JSON object but {type(obj).__name__}"
        if obj.get(self.event_time_field) is None:
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
        conversion = self.conversions.get(column.name)
        if conversion is not None:  # the JSON kind it is sent as; its conversion is checked after
            if conversion.source == "text":
                return isinstance(value, str)
            return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        kind = column.type.name
        if kind == "string":
            return isinstance(value, str)
        if kind == "boolean":
            return isinstance(value, bool)
        if kind in INTEGER_BITS:
            bits = INTEGER_BITS[kind]
            return isinstance(value, int) and not isinstance(value, bool) and -(2**bits) <= value < 2**bits
        if kind in {"float", "double"}:
            return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        line = json.dumps({column.name: value}, separators=(",", ":")).encode()
        _, rejected = self.column_readers[column.name].read([line])
        if rejected:
            return False
        if column.type.name == "date":
            return to_date([value]).null_count == 0
        return True
