"""Avro events for the binary-format tests: the events table's writer schemas (two versions a
producer really moves between), values framed by confluent-kafka's real ``AvroSerializer``
against the registry stand-in, and a hostile corpus of binary messages."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from tidemark.ingest.decoders.binary import varint

EVENT_V1: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "namespace": "shop.events",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "user_id", "type": ["null", "int"], "default": None},
        {"name": "app", "type": ["null", "string"], "default": None},
        {"name": "event_type", "type": {"type": "enum", "name": "Kind", "symbols": ["click", "view", "buy"]}},
        {
            "name": "amount",
            "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}],
            "default": None,
        },
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
# v2: user_id widened to long, a field the table does not have, event_time in microseconds
EVENT_V2: dict[str, Any] = {
    **EVENT_V1,
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "user_id", "type": ["null", "long"], "default": None},
        {"name": "app", "type": ["null", "string"], "default": None},
        {"name": "event_type", "type": "shop.events.Kind_v2"},
        {"name": "session", "type": ["null", "string"], "default": None},
        {
            "name": "amount",
            "type": [
                "null",
                {
                    "type": "fixed",
                    "name": "Money",
                    "size": 8,
                    "logicalType": "decimal",
                    "precision": 12,
                    "scale": 2,
                },
            ],
            "default": None,
        },
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ],
}
EVENT_V2["fields"][3]["type"] = {
    "type": "enum",
    "name": "Kind_v2",
    "symbols": ["click", "view", "buy", "refund"],
}
# a producer's schema tidemark cannot read into the table: event_time sent as a string
EVENT_TIME_AS_TEXT: dict[str, Any] = {
    **EVENT_V1,
    "fields": [
        f if f["name"] != "event_time" else {"name": "event_time", "type": "string"}
        for f in EVENT_V1["fields"]
    ],
}

GOOD_EVENT: dict[str, Any] = {
    "event_id": "e1",
    "user_id": 7,
    "app": "web",
    "event_type": "click",
    "amount": Decimal("12.50"),
    "event_time": datetime(2026, 11, 22, 10, 15, tzinfo=UTC),
}


def serializer(registry_url: str, schema: dict[str, Any], topic: str = "events") -> Any:
    """A producer's value serializer for ``schema``: the real AvroSerializer, which registers
    the schema under ``<topic>-value`` and frames each value with its id."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    serialize = AvroSerializer(client, json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    return lambda record: serialize(record, context)


def avro_events(
    registry_url: str,
    records: Sequence[dict[str, Any]],
    schema: dict[str, Any] = EVENT_V1,
    topic: str = "events",
) -> list[bytes]:
    serialize = serializer(registry_url, schema, topic)
    return [serialize({**GOOD_EVENT, **r}) for r in records]


def plain_avro(records: Sequence[dict[str, Any]], schema: dict[str, Any] = EVENT_V1) -> list[bytes]:
    """Unframed binary records (topics without a registry)."""

    from fastavro import parse_schema, schemaless_writer

    parsed = parse_schema(schema)
    out = []
    for record in records:
        buffer = io.BytesIO()
        schemaless_writer(buffer, parsed, {**GOOD_EVENT, **record})
        out.append(buffer.getvalue())
    return out


def hostile_avro(registry_url: str, topic: str = "events") -> list[tuple[str, bytes | None, str | None]]:
    """(name, message, expected reason or None for a good row): each a class of bad binary input."""
    good = avro_events(registry_url, [{}], topic=topic)[0]
    header, body = good[:5], good[5:]
    unresolvable = avro_events(registry_url, [{"event_time": "10:15"}], EVENT_TIME_AS_TEXT, topic)[0]
    nullable_time = {
        **EVENT_V1,
        "fields": [
            f
            if f["name"] != "event_time"
            else {"name": "event_time", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]}
            for f in EVENT_V1["fields"]
        ],
    }
    return [
        ("a good record", good, None),
        ("JSON on an Avro topic", b'{"event_id": "e1", "event_type": "click"}', "bad_framing"),
        ("empty", b"", "bad_framing"),
        ("only the magic byte", b"\x00", "bad_framing"),
        ("magic byte 1", b"\x01" + good[1:], "bad_framing"),
        ("a header and no record", header, "undecodable"),
        ("unknown schema id", b"\x00\x00\x01\x86\xa0" + body, "unknown_schema_id"),
        ("truncated", good[:-3], "undecodable"),
        ("a trailing byte", good + b"\x00", "undecodable"),
        ("two records in one message", good + body, "undecodable"),
        ("a string longer than the message", header + b"\xfe\xff\xff\xff\x0f" + body[1:], "undecodable"),
        ("a negative string length", header + b"\x03" + body[1:], "undecodable"),
        ("a union branch out of range", header + body[:3] + b"\x08" + body[4:], "undecodable"),
        ("an enum symbol out of range", _with_kind(header, body, 9), "undecodable"),
        ("a writer schema the table cannot read", unresolvable, "schema_unresolvable"),
        (
            "null event time",
            avro_events(registry_url, [{"event_time": None}], nullable_time, topic)[0],
            "null_event_time",
        ),
        (
            "year 1899",
            avro_events(registry_url, [{"event_time": datetime(1899, 12, 31, tzinfo=UTC)}], topic=topic)[0],
            "event_time_out_of_range",
        ),
        ("past year 9999", header + _long_millis_event(body, 2**62), "type_mismatch"),
        ("tombstone", None, "tombstone"),
        ("non-ASCII", avro_events(registry_url, [{"app": "café ☕"}], topic=topic)[0], None),
    ]


def _with_kind(header: bytes, body: bytes, index: int) -> bytes:
    """The good record with its enum index replaced (fields before it: id, user, app)."""

    from fastavro import parse_schema, schemaless_reader, schemaless_writer

    record = schemaless_reader(io.BytesIO(body), parse_schema(EVENT_V1), None)
    prefix = io.BytesIO()
    head = {**EVENT_V1, "fields": EVENT_V1["fields"][:3]}
    schemaless_writer(prefix, parse_schema({**head, "name": "Head"}), record)
    rest = body[len(prefix.getvalue()) + 1 :]
    return header + prefix.getvalue() + varint(index) + rest


def _long_millis_event(body: bytes, millis: int) -> bytes:
    """The good record with its event time (the last field) replaced by ``millis``."""

    from fastavro import parse_schema, schemaless_reader, schemaless_writer

    stripped = {**EVENT_V1, "fields": [*EVENT_V1["fields"][:-1], {"name": "event_time", "type": "long"}]}
    parsed = parse_schema({**stripped, "name": "Raw"})
    record = schemaless_reader(io.BytesIO(body), parsed, None)
    assert isinstance(record, dict)
    out = io.BytesIO()
    schemaless_writer(out, parsed, {**record, "event_time": millis})
    return out.getvalue()
