"""Avro messages: the Confluent wire format (magic byte 0, a 4-byte big-endian schema id, the
binary record) with writer schemas from the Schema Registry, or plain binary records with one
writer schema file (``source.writer_schema``).

fastavro (C) decodes each message with its own writer schema, which must consume the message
exactly: trailing bytes are not another record. The records of each writer schema then become
Arrow columns in one conversion per column, read into the table's types by Avro's resolution
rules (``avro_schema.py``), so one batch may mix writer versions.

Reasons of its own:
- ``bad_framing``: (registry topics) not the Confluent framing: no magic byte 0, or shorter
  than its 5-byte header (a JSON message on an Avro topic is this);
- ``unknown_schema_id``: the registry has no schema of the message's id;
- ``undecodable``: the payload is not a record of its writer schema (truncated, corrupt, or
  with trailing bytes);
- ``schema_unresolvable``: the writer schema cannot be read into the table's schema (a type
  Avro cannot promote, a missing ``not null`` column, a union of several types).
A registry that does not answer fails the task (``registry.py``), never a record.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from tidemark.ingest.conversions import Conversion, convert
from tidemark.ingest.decoders import Decoded, Verdict
from tidemark.ingest.decoders.avro_schema import ReadPlan, Unresolvable, read_plan
from tidemark.ingest.registry import UnknownSchemaIdError, WriterSchemas
from tidemark.schema import Column

if TYPE_CHECKING:
    import pyarrow as pa

MAGIC = 0
HEADER_BYTES = 5


class AvroDecoder:
    """One per task: it caches the read plan of every writer schema it met."""

    def __init__(
        self,
        columns: list[Column],
        conversions: dict[str, Conversion],
        schemas: WriterSchemas,
        *,
        framed: bool,
    ) -> None:
        self.columns = columns
        self.conversions = conversions
        self.schemas = schemas
        self.framed = framed
        self._plans: dict[int | None, ReadPlan | Verdict] = {}

    def decode(self, values: Sequence[bytes], index: Sequence[int]) -> Decoded:
        import numpy as np
        import pyarrow as pa

        rejected: dict[int, Verdict] = {}
        framed: dict[int | None, tuple[list[int], list[bytes]]] = {}
        for i, value in zip(index, values, strict=True):
            schema_id, body = self._frame(value)
            if isinstance(body, tuple):
                rejected[i] = body
                continue
            plan = self._plan(schema_id)
            if isinstance(plan, tuple):
                rejected[i] = plan
                continue
            rows, bodies = framed.setdefault(schema_id, ([], []))
            rows.append(i)
            bodies.append(body)
        groups: dict[int | None, tuple[list[int], list[dict[str, Any]]]] = {}
        for schema_id, (rows, bodies) in framed.items():
            plan = self._plans[schema_id]
            assert not isinstance(plan, tuple)
            groups[schema_id] = self._records(schema_id, plan, rows, bodies, rejected)
        accepted: list[int] = []
        parts: dict[str, list[pa.Array]] = {c.name: [] for c in self.columns}
        bad: dict[str, list[pa.Array]] = {c.name: [] for c in self.columns}
        for schema_id, (rows, records) in groups.items():
            plan = self._plans[schema_id]
            assert not isinstance(plan, tuple)
            accepted += rows
            for column in self.columns:
                col, unfit = self._column(records, column, plan.sources[column.name])
                parts[column.name].append(col)
                bad[column.name].append(unfit)
        order = pa.array(np.argsort(np.asarray(accepted, dtype=np.int64), kind="stable"))
        columns: dict[str, pa.Array] = {}
        mismatched: dict[str, pa.Array] = {}
        for column in self.columns:
            target = column.type.to_arrow()
            columns[column.name] = (
                pa.concat_arrays(parts[column.name]).take(order) if accepted else pa.array([], target)
            )
            mismatched[column.name] = (
                pa.concat_arrays(bad[column.name]).take(order) if accepted else pa.array([], pa.bool_())
            )
        return Decoded(columns, sorted(accepted), mismatched, rejected)

    def _records(
        self,
        schema_id: int | None,
        plan: ReadPlan,
        rows: list[int],
        bodies: list[bytes],
        rejected: dict[int, Verdict],
    ) -> tuple[list[int], list[dict[str, Any]]]:
        """The records of one writer schema's messages, each of which must end exactly at its
        message's end. They are read from one stream (a fifth cheaper than a stream per
        message); a record that fails or does not end at its boundary is read again alone,
        and the stream goes on from the next message's start."""
        from fastavro import schemaless_reader

        stream = io.BytesIO(b"".join(bodies))
        good_rows: list[int] = []
        records: list[dict[str, Any]] = []
        end = 0
        for i, body in zip(rows, bodies, strict=True):
            end += len(body)
            try:
                record = schemaless_reader(stream, plan.schema, None)
                if stream.tell() == end:
                    good_rows.append(i)
                    records.append(cast("dict[str, Any]", record))  # a record schema: a dict
                    continue
            except Exception:
                pass
            stream.seek(end)
            verdict = self._alone(schema_id, plan, body)
            if isinstance(verdict, tuple):
                rejected[i] = verdict
            else:  # not reachable for a deterministic decoder; kept exact anyway
                good_rows.append(i)
                records.append(verdict)
        return good_rows, records

    @staticmethod
    def _alone(schema_id: int | None, plan: ReadPlan, body: bytes) -> dict[str, Any] | Verdict:
        from fastavro import schemaless_reader

        stream = io.BytesIO(body)
        try:
            record = schemaless_reader(stream, plan.schema, None)
        except Exception as exc:
            return "undecodable", f"{_of(schema_id)}{type(exc).__name__}: {exc}"[:300]
        if stream.tell() != len(body):
            return "undecodable", f"{_of(schema_id)}{len(body) - stream.tell()} bytes after the record"
        return cast("dict[str, Any]", record)

    def _frame(self, value: bytes) -> tuple[int | None, bytes | Verdict]:
        """The schema id and the record's bytes, or the verdict of a message not framed."""
        if not self.framed:
            return None, value
        if len(value) < HEADER_BYTES or value[0] != MAGIC:
            why = "no magic byte 0" if value[:1] != bytes([MAGIC]) else f"{len(value)} bytes, header is 5"
            return None, ("bad_framing", f"{why} (first bytes {value[:8].hex()})")
        return int.from_bytes(value[1:HEADER_BYTES], "big"), value[HEADER_BYTES:]

    def _plan(self, schema_id: int | None) -> ReadPlan | Verdict:
        plan = self._plans.get(schema_id)
        if plan is None:
            try:
                written = self.schemas.schema(schema_id)
                if written.schema_type != "AVRO":
                    raise Unresolvable(f"a {written.schema_type} schema on an Avro topic")
                plan = read_plan(written.text, self.columns, self.conversions)
            except UnknownSchemaIdError:
                plan = ("unknown_schema_id", f"schema_id={schema_id}")
            except Unresolvable as exc:
                plan = ("schema_unresolvable", f"{_of(schema_id)}{exc}")
            self._plans[schema_id] = plan
        return plan

    def _column(
        self, records: list[dict[str, Any]], column: Column, source: pa.DataType | None
    ) -> tuple[pa.Array, pa.Array]:
        """One column of one writer schema's records in the table's type, and the mask of
        values that could not be converted."""
        import pyarrow as pa

        target = column.type.to_arrow()
        n = len(records)
        if source is None:  # not in this writer schema: null
            return pa.nulls(n, target), pa.array([False] * n, pa.bool_())
        values = pa.array([r.get(column.name) for r in records], type=source)
        if column.name in self.conversions:
            return convert(values, self.conversions[column.name], column)
        return cast_each(values, target)


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
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    cast = []
    for i in range(len(values)):
        try:
            cast.append(values.slice(i, 1).cast(target)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            cast.append(None)
    out = pa.array(cast, type=target)
    return out, pc.and_(pc.is_valid(values), pc.is_null(out))


def _of(schema_id: int | None) -> str:
    return f"schema_id={schema_id}: " if schema_id is not None else ""
