"""Protobuf messages in the Confluent wire format: magic byte 0, a 4-byte schema id, the
message indexes (zigzag varints: a count, then the path to the message type in the schema's
file; a single 0 for the first message), then the message.

Each message is parsed by the protobuf runtime (C, upb) with its writer's own message type,
then the table's columns are read from it (``protobuf_schema.py``). A message whose bytes
parse but leave unknown fields is not its writer schema's message (corrupt, or framed with the
wrong id): ``undecodable``. The reasons are the Avro ones: ``bad_framing`` (no magic byte, or
message indexes that do not parse), ``unknown_schema_id``, ``schema_unresolvable`` (a type
the table cannot read, a message index with no message), ``undecodable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidemark.avro_schema import Unresolvable
from tidemark.conversions import Conversion
from tidemark.envelopes import Envelope
from tidemark.ingest.decoders.base import Decoded, RecordGroup, Records, Verdict
from tidemark.ingest.decoders.binary import (
    Group,
    assemble,
    confluent_header,
    of,
    typed_column,
    typed_records,
)
from tidemark.ingest.decoders.protobuf_schema import (
    WRAPPERS,
    ProtoPlan,
    field_kind,
    is_map,
    message_descriptor,
    proto_plan,
)
from tidemark.ingest.registry import UnknownSchemaIdError, WriterSchemas
from tidemark.schema import Column

PlanKey = tuple[int, tuple[int, ...]]  # (schema id, message indexes)


class ProtobufDecoder:
    """One per task: it caches the plan of every (schema id, message type) it met."""

    def __init__(
        self,
        columns: list[Column],
        conversions: dict[str, Conversion],
        schemas: WriterSchemas,
        envelope: Envelope | None = None,
    ) -> None:
        self.columns = columns
        self.conversions = conversions
        self.schemas = schemas
        self.envelope = envelope  # the messages are this CDC envelope (its row resolves)
        self._plans: dict[PlanKey, ProtoPlan | Verdict] = {}

    def decode(self, values: Sequence[bytes], index: Sequence[int]) -> Decoded:
        rejected: dict[int, Verdict] = {}
        groups: list[Group] = []
        for key, (rows, messages) in self._parse(values, index, rejected).items():
            plan = self._plans[key]
            assert not isinstance(plan, tuple)
            typed = {}
            for c in self.columns:
                getter = plan.getters[c.name]
                values_of = [getter[0](m) for m in messages] if getter else [None] * len(messages)
                typed[c.name] = typed_column(
                    values_of, getter[1] if getter else None, c, self.conversions.get(c.name)
                )
            groups.append((rows, typed))
        return assemble(self.columns, groups, rejected)

    def records(self, values: Sequence[bytes], index: Sequence[int]) -> Records:
        """Each message as a dict (what an envelope unwraps): its row messages read by the
        plan's getters, as plain messages are; the envelope's own fields as values."""
        rejected: dict[int, Verdict] = {}
        groups = []
        for key, (rows, messages) in self._parse(values, index, rejected).items():
            plan = self._plans[key]
            assert not isinstance(plan, tuple)
            groups.append(RecordGroup(key, rows, [message_record(m, plan) for m in messages]))
        return Records(groups, rejected)

    def typed(self, records: Records) -> Decoded:
        groups: list[Group] = []
        for group in records.groups:
            plan = self._plans[group.key]
            assert not isinstance(plan, tuple)
            groups.append(typed_records(group, self.columns, self.conversions, plan.source))
        return assemble(self.columns, groups, records.rejected)

    def _parse(
        self, values: Sequence[bytes], index: Sequence[int], rejected: dict[int, Verdict]
    ) -> dict[PlanKey, tuple[list[int], list[Any]]]:
        """The parsed messages of each (schema id, message type); the refused in ``rejected``."""
        from google.protobuf.message import DecodeError
        from google.protobuf.unknown_fields import UnknownFieldSet

        found: dict[PlanKey, tuple[list[int], list[Any]]] = {}
        for i, value in zip(index, values, strict=True):
            header = confluent_header(value)
            if isinstance(header[0], str):
                rejected[i] = (header[0], str(header[1]))
                continue
            schema_id, rest = header[0], bytes(header[1])
            indexes = message_indexes(rest)
            if indexes is None:
                rejected[i] = ("bad_framing", f"schema_id={schema_id}: message indexes that do not parse")
                continue
            path, body = indexes
            key = (schema_id, path)
            plan = self._plan(key)
            if isinstance(plan, tuple):
                rejected[i] = plan
                continue
            message = plan.message_class()
            try:
                message.ParseFromString(body)
            except (DecodeError, RuntimeError, ValueError) as exc:
                rejected[i] = ("undecodable", f"{of(schema_id)}{type(exc).__name__}: {exc}"[:300])
                continue
            if len(UnknownFieldSet(message)):
                rejected[i] = ("undecodable", f"{of(schema_id)}fields the writer schema does not have")
                continue
            rows, messages = found.setdefault(key, ([], []))
            rows.append(i)
            messages.append(message)
        return found

    def _plan(self, key: PlanKey) -> ProtoPlan | Verdict:
        plan = self._plans.get(key)
        if plan is None:
            schema_id, path = key
            try:
                written = self.schemas.schema(schema_id)
                if written.schema_type != "PROTOBUF":
                    raise Unresolvable(f"a {written.schema_type} schema on a Protobuf topic")
                descriptor = message_descriptor(written.text, list(path), self.schemas.imports(written))
                plan = proto_plan(descriptor, self.columns, self.conversions, self.envelope)
            except UnknownSchemaIdError:
                plan = ("unknown_schema_id", f"schema_id={schema_id}")
            except Unresolvable as exc:
                plan = ("schema_unresolvable", f"{of(schema_id)}{exc}")
            self._plans[key] = plan
        return plan


def message_record(message: Any, plan: ProtoPlan) -> dict[str, Any]:
    """A parsed envelope message as a dict: its row messages (``plan.row_type``) as the
    plan's getters read rows, wrappers as their value, enums as their symbol, unset fields
    with presence as None, other messages as dicts."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        name = field.name
        value = getattr(message, name)
        if is_map(field):
            out[name] = {k: _plain(v, plan) for k, v in value.items()}
        elif field.is_repeated:
            out[name] = [_plain(v, plan) for v in value]
        elif field.has_presence and not message.HasField(name):
            out[name] = None
        elif field_kind(field) == "enum":
            symbol = field.enum_type.values_by_number.get(value)
            out[name] = symbol.name if symbol is not None else value
        else:
            out[name] = _plain(value, plan)
    return out


def _plain(value: Any, plan: ProtoPlan) -> Any:
    from google.protobuf.message import Message

    if not isinstance(value, Message):
        return value
    full = value.DESCRIPTOR.full_name
    if full == plan.row_type:
        return {name: getter[0](value) for name, getter in plan.getters.items() if getter is not None}
    if full in WRAPPERS:
        return value.value
    return message_record(value, plan)


def message_indexes(data: bytes) -> tuple[tuple[int, ...], bytes] | None:
    """The message indexes at the start of ``data`` and the message after them, or None when
    they do not parse (a count or an index out of range, or the data ends inside them)."""
    count, at = _zigzag_varint(data, 0)
    if count is None:
        return None
    if count == 0:
        return (0,), data[at:]
    if count < 0 or count > 100:
        return None
    path = []
    for _ in range(count):
        value, at = _zigzag_varint(data, at)
        if value is None or value < 0:
            return None
        path.append(value)
    return tuple(path), data[at:]


def _zigzag_varint(data: bytes, at: int) -> tuple[int | None, int]:
    shift = result = 0
    while at < len(data) and shift < 64:
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7
    return None, at
