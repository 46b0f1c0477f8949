"""CDC envelopes: change records as capture tools send them, read as the flat records a CDC
table's merge folds (its columns, ``cdc.op_field`` and ``cdc.version_field``).

| ``cdc.envelope`` | message | the row | op | version (unless the row has its own) |
|---|---|---|---|---|
| ``flat`` | the row with op and version fields | the message | as sent | as sent |
| ``debezium`` | ``{before, after, op, source, ts_ms}``, or that under ``payload`` (``schemas.enable``) | ``after``; ``before`` for ``d`` | ``c``, ``u``, ``d``; a snapshot read ``r`` is ``c`` | ``source.lsn``, else ``ts_ms`` |
| ``maxwell`` | ``{database, table, type, ts, xoffset, data, old}`` | ``data`` | ``insert``/``bootstrap-insert`` ``c``, ``update`` ``u``, ``delete`` ``d`` | ``ts`` (s) x 10^6 + ``xoffset`` |
| ``canal`` | ``{data: [row], old, type, es, isDdl}`` (canal-json) | ``data[0]`` | ``INSERT`` ``c``, ``UPDATE`` ``u``, ``DELETE`` ``d`` | ``es`` (ms) |

The envelope is a step after decoding, the same for every format (Kafka Connect's
Transformation after its Converter): the format decodes a message into its record (a JSON
object, an Avro record, a Protobuf message as a dict), :meth:`Envelope.unwrap` turns that into
the flat record of one row change, and the format types the flat records into the table's
columns (``ingest/decoders/envelope.py``). A binary format's writer schema is the envelope:
:attr:`Envelope.row_field` names where its row type lies, the columns resolve against that type,
and op, version and the envelope's time are added (:meth:`Envelope.added_fields`).

The envelope's ``ts_ms`` (Debezium), ``ts`` (Maxwell) or ``es`` (Canal) is also given as a
column of that name when the row has none (declare ``source.conversions`` to use it as the
event time). A message that is not its envelope's shape (no op, an unknown op, a schema change
or truncate event, a Canal message of several rows, no row) is dirty ``invalid_envelope`` with
the reason; tombstones after deletes are tombstones. Numbers of a JSON envelope keep their
exact value: one with more digits than a double holds must be sent as a string (Debezium
``decimal.handling.mode=string``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

_DEBEZIUM_OPS = {"c": "c", "r": "c", "u": "u", "d": "d"}
_MAXWELL_OPS = {"insert": "c", "bootstrap-insert": "c", "update": "u", "delete": "d"}
_CANAL_OPS = {"INSERT": "c", "UPDATE": "u", "DELETE": "d"}


Verdict = tuple[str, str]


class _Refused(ValueError):
    """The message is not JSON by the standard (``invalid_json``)."""


class _NotEnvelope(ValueError):
    """The message is JSON but not the envelope's shape (``invalid_envelope``)."""


@dataclass(frozen=True)
class Shape:
    """Where an envelope's writer schema holds the row, and the fields every envelope has."""

    title: str
    row_field: str  # the row's type: a record (Canal: an array of records)
    op_key: str
    stamp: str  # the envelope's time, a column of that name when the row has none
    rows_listed: bool = False


SHAPES = {
    "debezium": Shape("Debezium", "after", "op", "ts_ms"),
    "maxwell": Shape("Maxwell", "data", "type", "ts"),
    "canal": Shape("Canal", "data", "type", "es", rows_listed=True),
}


@dataclass(frozen=True)
class Envelope:
    """A CDC table's envelope (``cdc.envelope``, not ``flat``) with the table's op and version
    fields: what a writer schema of it looks like, and the unwrapping of one decoded message."""

    kind: str
    op_field: str
    version_field: str

    @property
    def shape(self) -> Shape:
        return SHAPES[self.kind]

    @property
    def row_field(self) -> str:
        return self.shape.row_field

    @property
    def required_fields(self) -> tuple[str, str]:
        """The fields a writer schema of this envelope must have."""
        return self.shape.row_field, self.shape.op_key

    def not_this_envelope(self) -> str:
        """Why a writer schema without :attr:`required_fields` is refused."""
        return f"not a {self.shape.title} envelope: no {' or '.join(self.required_fields)} field"

    def added_fields(self, row_fields: Any) -> dict[str, tuple[str, bool]]:
        """The fields the flat record adds to the row's, as (kind, nullable): op always (the
        envelope's, mapped: a string), version and the envelope's time (longs) where the row
        has no field of that name."""
        added = {self.op_field: ("string", False)}
        if self.version_field not in row_fields:
            added[self.version_field] = ("long", False)
        if self.shape.stamp not in row_fields:
            added[self.shape.stamp] = ("long", True)
        return added

    def unwrap(self, message: Any) -> dict[str, Any] | Verdict:
        """The flat record of one decoded envelope (a JSON object, an Avro record, a Protobuf
        message as a dict), or the verdict of one that is not a row change."""
        if not isinstance(message, dict):
            return "invalid_envelope", f"{self.kind}: not a JSON object but {type(message).__name__}"
        try:
            row, op, version, stamp = _READERS[self.kind](message)
        except _NotEnvelope as exc:
            return "invalid_envelope", f"{self.kind}: {exc}"[:300]
        flat = {**row, self.op_field: op}
        if row.get(self.version_field) is None:
            flat[self.version_field] = version
        name, when = stamp
        flat.setdefault(name, when)
        return flat


def envelope_of(kind: str, op_field: str, version_field: str) -> Envelope | None:
    """The envelope of ``cdc.envelope`` (None: ``flat``, the message is the row)."""
    return None if kind == "flat" else Envelope(kind, op_field, version_field)


def strict_json_record(value: bytes) -> Any:
    """One JSON message parsed by the standard, numbers exact (an envelope's rows are typed
    after unwrapping, from values that must not have lost digits), or the ``invalid_json``
    verdict (a tuple: a JSON value is never one)."""
    try:
        # what json.loads does with bytes, through one decoder (json.loads builds one a call)
        return _DECODER.decode(value.decode(json.detect_encoding(value), "surrogatepass"))
    except (_Refused, ValueError, RecursionError) as exc:
        return "invalid_json", f"invalid JSON: {exc}"[:300]


Read = tuple[dict[str, Any], str, Any, tuple[str, Any]]


def _debezium(message: dict[str, Any]) -> Read:
    if "payload" in message and "schema" in message:  # the JSON converter with schemas.enable
        message = message["payload"]
        if not isinstance(message, dict):
            raise _NotEnvelope("payload is not an object")
    op = _op(message.get("op"), _DEBEZIUM_OPS, "op")
    row = _row(message.get("before" if op == "d" else "after"), "before" if op == "d" else "after")
    source = message.get("source")
    if not isinstance(source, dict):
        source = {}
    version = source.get("lsn") if source.get("lsn") is not None else message.get("ts_ms")
    return row, op, version, ("ts_ms", message.get("ts_ms"))


def _maxwell(message: dict[str, Any]) -> Read:
    op = _op(message.get("type"), _MAXWELL_OPS, "type")
    row = _row(message.get("data"), "data")
    ts, xoffset = message.get("ts"), message.get("xoffset") or 0
    version = ts * 1_000_000 + xoffset if isinstance(ts, int) and isinstance(xoffset, int) else None
    return row, op, version, ("ts", ts)


def _canal(message: dict[str, Any]) -> Read:
    if message.get("isDdl"):
        raise _NotEnvelope("a schema change (isDdl), not a row change")
    op = _op(message.get("type"), _CANAL_OPS, "type")
    rows = message.get("data")
    if not isinstance(rows, list) or len(rows) != 1:
        count = len(rows) if isinstance(rows, list) else 0
        raise _NotEnvelope(f"data holds {count} rows; one row per message is read (canal.mq.flatMessage)")
    return _row(rows[0], "data[0]"), op, message.get("es"), ("es", message.get("es"))


_READERS = {"debezium": _debezium, "maxwell": _maxwell, "canal": _canal}


def _op(value: Any, ops: dict[str, str], key: str) -> str:
    if value not in ops:
        raise _NotEnvelope(f"{key} {value!r} is not a row change ({', '.join(ops)})")
    return ops[value]


def _row(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _NotEnvelope(f"{key} is {'missing' if value is None else type(value).__name__}, not the row")
    return value


def _refuse(name: str) -> Any:
    raise _Refused(f"{name} is not JSON")


def _exact_float(text: str) -> float:
    value = float(text)
    if repr(value) != text and Decimal(repr(value)) != Decimal(text):  # the first test: most numbers
        raise _Refused(f"the number {text} has more digits than a double holds; send it as a string")
    return value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        keys = [key for key, _ in pairs]
        twice = next(key for i, key in enumerate(keys) if key in keys[:i])
        raise _Refused(f"key {twice!r} given twice")
    return out


_DECODER = json.JSONDecoder(parse_constant=_refuse, parse_float=_exact_float, object_pairs_hook=_unique)
