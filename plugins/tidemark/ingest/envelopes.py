"""CDC envelopes: change records as capture tools send them, read as the flat records a CDC
table's merge folds (its columns, ``cdc.op_field`` and ``cdc.version_field``).

| ``cdc.envelope`` | message | the row | op | version (unless the row has its own) |
|---|---|---|---|---|
| ``flat`` | the row with op and version fields | the message | as sent | as sent |
| ``debezium`` | ``{before, after, op, source, ts_ms}``, or that under ``payload`` (``schemas.enable``) | ``after``; ``before`` for ``d`` | ``c``, ``u``, ``d``; a snapshot read ``r`` is ``c`` | ``source.lsn``, else ``ts_ms`` |
| ``maxwell`` | ``{database, table, type, ts, xoffset, data, old}`` | ``data`` | ``insert``/``bootstrap-insert`` ``c``, ``update`` ``u``, ``delete`` ``d`` | ``ts`` (s) x 10^6 + ``xoffset`` |
| ``canal`` | ``{data: [row], old, type, es, isDdl}`` (canal-json) | ``data[0]`` | ``INSERT`` ``c``, ``UPDATE`` ``u``, ``DELETE`` ``d`` | ``es`` (ms) |

The envelope's ``ts_ms`` (Debezium), ``ts`` (Maxwell) or ``es`` (Canal) is also given as a
column of that name when the row has none (declare ``source.conversions`` to use it as the
event time). A message that is not its envelope's shape (no op, an unknown op, a schema change
or truncate event, a Canal message of several rows, no row) is dirty ``invalid_envelope`` with
the reason; tombstones after deletes are tombstones. Numbers keep their exact value: one with
more digits than a double holds must be sent as a string (Debezium
``decimal.handling.mode=string``).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

ENVELOPES = ("flat", "debezium", "maxwell", "canal")
Verdict = tuple[str, str]
_DEBEZIUM_OPS = {"c": "c", "r": "c", "u": "u", "d": "d"}
_MAXWELL_OPS = {"insert": "c", "bootstrap-insert": "c", "update": "u", "delete": "d"}
_CANAL_OPS = {"INSERT": "c", "UPDATE": "u", "DELETE": "d"}


class _Refused(ValueError):
    """The message is not JSON by the standard (``invalid_json``)."""


class _NotEnvelope(ValueError):
    """The message is JSON but not the envelope's shape (``invalid_envelope``)."""


def flat_message(envelope: str, value: bytes, op_field: str, version_field: str) -> bytes | Verdict:
    """The flat JSON record of one enveloped change, or the verdict of a message that is not."""
    try:
        message = json.loads(
            value, parse_constant=_refuse, parse_float=_exact_float, object_pairs_hook=_unique
        )
    except (_Refused, ValueError, RecursionError) as exc:
        return "invalid_json", f"invalid JSON: {exc}"[:300]
    if not isinstance(message, dict):
        return "invalid_envelope", f"{envelope}: not a JSON object but {type(message).__name__}"
    flat = flat_record(envelope, message, op_field, version_field)
    if isinstance(flat, tuple):
        return flat
    return json.dumps(flat, separators=(",", ":"), ensure_ascii=False).encode()


def flat_record(
    envelope: str, message: dict[str, Any], op_field: str, version_field: str
) -> dict[str, Any] | Verdict:
    """The flat record of one decoded envelope (a JSON object, or an Avro record), or the
    verdict of one that is not a row change."""
    try:
        row, op, version, stamp = _READERS[envelope](message)
    except _NotEnvelope as exc:
        return "invalid_envelope", f"{envelope}: {exc}"[:300]
    flat = {**row, op_field: op}
    if row.get(version_field) is None:
        flat[version_field] = version
    name, when = stamp
    flat.setdefault(name, when)
    return flat


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


def _flat(message: dict[str, Any]) -> Read:
    raise AssertionError("flat records are not unwrapped")


_READERS = {"debezium": _debezium, "maxwell": _maxwell, "canal": _canal, "flat": _flat}


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
    if Decimal(repr(value)) != Decimal(text):
        raise _Refused(f"the number {text} has more digits than a double holds; send it as a string")
    return value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"key {key!r} given twice")
        out[key] = value
    return out
