"""Helpers of ``bench/dump_throughput.py --format avro|protobuf`` (not a benchmark itself):
the bench's JSON events encoded as a producer with a Schema Registry sends them (the real
confluent-kafka serializers against the registry stand-in), the table YAML changes of the
format, and the baseline that decodes with the same library as tidemark (fastavro, the
protobuf runtime) and writes Parquet with pyarrow, without tidemark's checks."""

from __future__ import annotations

import io
import json
from datetime import datetime
from decimal import Decimal
from typing import Any

import _root  # noqa: F401 - the repository root on sys.path, for tests.helpers

from tests.helpers.protobuf import event_class
from tidemark.ingest.decoders.protobuf_schema import message_descriptor
from tidemark.ingest.registry import SchemaRegistry
from tidemark_dev.demo_avro import EVENT_SCHEMA

KINDS = {"view": 1, "click": 0, "add_to_cart": 2, "purchase": 2}


def encoder(fmt: str, registry_url: str, topic: str) -> Any:
    """value (JSON bytes) -> the same event in ``fmt``, framed with its schema id."""
    if fmt == "avro":
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(EVENT_SCHEMA))
        context = SerializationContext(topic, MessageField.VALUE)

        def avro(value: bytes) -> bytes:
            record = json.loads(value)
            record["event_time"] = datetime.fromisoformat(record["event_time"])
            record["amount"] = Decimal(record["amount"])
            return bytes(serialize(record, context))

        return avro
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    cls = event_class(1)
    serialize = ProtobufSerializer(
        cls, SchemaRegistryClient({"url": registry_url}), {"use.deprecated.format": False}
    )
    context = SerializationContext(topic, MessageField.VALUE)

    def protobuf(value: bytes) -> bytes:
        record = json.loads(value)
        message = cls(
            event_id=record["event_id"], event_type=KINDS[record["event_type"]], amount=record["amount"]
        )
        message.user_id.value = record["user_id"] % 2**31
        message.app = record["app"]
        message.event_time.FromDatetime(datetime.fromisoformat(record["event_time"]))
        return bytes(serialize(message, context))

    return protobuf


def table_changes(fmt: str, registry_url: str) -> dict[str, Any]:
    """The source section of the bench table in ``fmt``."""
    changes: dict[str, Any] = {"format": fmt, "schema_registry": {"url": registry_url}}
    if fmt == "protobuf":
        changes["conversions"] = {"amount": {"from": "text"}}
    return changes


def baseline_decoder(fmt: str, registry_url: str) -> Any:
    """values -> a pyarrow Table of the events, decoded with tidemark's decoder library."""
    import pyarrow as pa

    registry = SchemaRegistry("bench", {"url": registry_url}, serialized=fmt == "protobuf")
    columns = ["event_id", "user_id", "app", "event_type", "amount", "event_time"]
    if fmt == "avro":
        from fastavro import parse_schema, schemaless_reader

        schemas: dict[int, Any] = {}

        def avro(values: list[bytes]) -> pa.Table:
            records = []
            for value in values:
                schema_id = int.from_bytes(value[1:5], "big")
                if schema_id not in schemas:
                    schemas[schema_id] = parse_schema(json.loads(registry.schema(schema_id).text))
                records.append(schemaless_reader(io.BytesIO(value[5:]), schemas[schema_id], None))
            return pa.Table.from_pylist([{c: r[c] for c in columns} for r in records])  # type: ignore[index]

        return avro
    from google.protobuf.message_factory import GetMessageClass

    classes: dict[int, Any] = {}

    def protobuf(values: list[bytes]) -> pa.Table:
        rows = []
        for value in values:
            schema_id = int.from_bytes(value[1:5], "big")
            if schema_id not in classes:
                classes[schema_id] = GetMessageClass(message_descriptor(registry.schema(schema_id).text, [0]))
            message = classes[schema_id].FromString(value[6:])
            rows.append(
                {
                    "event_id": message.event_id,
                    "user_id": message.user_id.value,
                    "app": message.app,
                    "event_type": message.event_type,
                    "amount": message.amount,
                    "event_time": message.event_time.seconds * 1_000_000 + message.event_time.nanos // 1000,
                }
            )
        return pa.Table.from_pylist(rows)

    return protobuf


if __name__ == "__main__":
    print("bench/_formats.py: helpers of bench/dump_throughput.py --format avro|protobuf")
