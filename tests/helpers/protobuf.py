"""Protobuf events for the binary-format tests: message types built as a producer's generated
code would describe them (FileDescriptorProto, no protoc here), framed by confluent-kafka's
real ``ProtobufSerializer`` against the registry stand-in."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

WELL_KNOWN = ["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"]


def common_file() -> Any:
    """``shop/common.proto``: a file of the producer's own that v3 imports (``shop.Device``)."""
    from google.protobuf import descriptor_pb2

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="shop/common.proto", package="shop", syntax="proto3")
    device = file.message_type.add(name="Device")
    device.field.add(name="os", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    device.field.add(name="version", number=2, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    return file


def event_class(version: int = 1, *, event_time_as_text: bool = False) -> Any:
    """The producer's ``shop.Event``: v1 (first message of its file), v2 (second message of
    a file whose first is ``Header``: index [1]) with user_id widened and a session field, or
    v3: v2 and a ``device`` of the imported ``shop/common.proto`` (a schema reference)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2, wrappers_pb2
    from google.protobuf.message_factory import GetMessageClass

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name=f"shop/event_v{version}{'_text' if event_time_as_text else ''}.proto",
        package="shop",
        syntax="proto3",
        dependency=WELL_KNOWN + (["shop/common.proto"] if version == 3 else []),
    )
    if version >= 2:
        file.message_type.add(name="Header").field.add(
            name="id", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL
        )
    kind = file.enum_type.add(name="Kind")
    for number, name in enumerate(["CLICK", "VIEW", "BUY"]):
        kind.value.add(name=name, number=number)
    event = file.message_type.add(name="Event")
    add = event.field.add
    add(name="event_id", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    if version == 1:
        add(
            name="user_id",
            number=2,
            type=field.TYPE_MESSAGE,
            type_name=".google.protobuf.Int32Value",
            label=field.LABEL_OPTIONAL,
        )
    else:
        add(
            name="user_id",
            number=2,
            type=field.TYPE_MESSAGE,
            type_name=".google.protobuf.Int64Value",
            label=field.LABEL_OPTIONAL,
        )
        add(name="session", number=9, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    if version == 3:
        add(
            name="device",
            number=10,
            type=field.TYPE_MESSAGE,
            type_name=".shop.Device",
            label=field.LABEL_OPTIONAL,
        )
    add(
        name="app",
        number=3,
        type=field.TYPE_STRING,
        label=field.LABEL_OPTIONAL,
        proto3_optional=True,
        oneof_index=0,
    )
    event.oneof_decl.add(name="_app")
    add(name="event_type", number=4, type=field.TYPE_ENUM, type_name=".shop.Kind", label=field.LABEL_OPTIONAL)
    add(name="amount", number=5, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    if event_time_as_text:
        add(name="event_time", number=6, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    else:
        add(
            name="event_time",
            number=6,
            type=field.TYPE_MESSAGE,
            type_name=".google.protobuf.Timestamp",
            label=field.LABEL_OPTIONAL,
        )
    add(name="tags", number=7, type=field.TYPE_STRING, label=field.LABEL_REPEATED)
    entry = event.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    add(
        name="attrs",
        number=8,
        type=field.TYPE_MESSAGE,
        type_name=".shop.Event.AttrsEntry",
        label=field.LABEL_REPEATED,
    )
    pool = descriptor_pool.DescriptorPool()
    for dependency in (timestamp_pb2, wrappers_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        dependency.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    if version == 3:
        pool.Add(common_file())
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName("shop.Event"))


def proto_events(
    registry_url: str,
    records: Sequence[dict[str, Any]],
    version: int = 1,
    topic: str = "events",
    **kinds: Any,
) -> list[bytes]:
    """Framed events: each record's fields set on a fresh message (event_time a datetime)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    cls = event_class(version, **kinds)
    serialize = ProtobufSerializer(
        cls, SchemaRegistryClient({"url": registry_url}), {"use.deprecated.format": False}
    )
    context = SerializationContext(topic, MessageField.VALUE)
    out = []
    for record in records:
        message = cls(
            event_id=record.get("event_id", "e1"),
            event_type=record.get("event_type", 0),
            amount=record.get("amount", "12.50"),
        )
        if record.get("user_id") is not None:
            message.user_id.value = record["user_id"]
        if "app" in record:
            if record["app"] is not None:
                message.app = record["app"]
        else:
            message.app = "web"
        when = record.get("event_time")
        if isinstance(when, datetime):
            message.event_time.FromDatetime(when)
        elif when is not None:
            message.event_time = when
        message.tags.extend(record.get("tags", []))
        message.attrs.update(record.get("attrs", {}))
        if version >= 2 and "session" in record:
            message.session = record["session"]
        if version == 3 and record.get("device"):
            message.device.os, message.device.version = record["device"]
        out.append(serialize(message, context))
    return out


def orders_envelope_class() -> Any:
    """Debezium's envelope of ``shop.orders`` as its Protobuf converter describes it: ``Value``
    (the row: wrappers and ``optional`` for nullable columns, the decimal as text), ``Source``
    (``lsn`` nullable) and ``Envelope`` {before, after, source, op, ts_ms}: message index [2]."""
    from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2, wrappers_pb2
    from google.protobuf.message_factory import GetMessageClass

    field = descriptor_pb2.FieldDescriptorProto
    optional, message = field.LABEL_OPTIONAL, field.TYPE_MESSAGE
    file = descriptor_pb2.FileDescriptorProto(
        name="shop/orders_envelope.proto", package="shop.orders", syntax="proto3", dependency=WELL_KNOWN
    )
    value = file.message_type.add(name="Value")
    value.field.add(name="order_id", number=1, type=field.TYPE_INT64, label=optional)
    value.field.add(
        name="customer_id", number=2, type=message, type_name=".google.protobuf.Int64Value", label=optional
    )
    value.field.add(
        name="status", number=3, type=field.TYPE_STRING, label=optional, proto3_optional=True, oneof_index=0
    )
    value.oneof_decl.add(name="_status")
    value.field.add(name="amount", number=4, type=field.TYPE_STRING, label=optional)
    value.field.add(
        name="updated_at", number=5, type=message, type_name=".google.protobuf.Timestamp", label=optional
    )
    source = file.message_type.add(name="Source")
    source.field.add(name="db", number=1, type=field.TYPE_STRING, label=optional)
    source.field.add(
        name="lsn", number=2, type=message, type_name=".google.protobuf.Int64Value", label=optional
    )
    envelope = file.message_type.add(name="Envelope")
    envelope.field.add(name="before", number=1, type=message, type_name=".shop.orders.Value", label=optional)
    envelope.field.add(name="after", number=2, type=message, type_name=".shop.orders.Value", label=optional)
    envelope.field.add(name="source", number=3, type=message, type_name=".shop.orders.Source", label=optional)
    envelope.field.add(name="op", number=4, type=field.TYPE_STRING, label=optional)
    envelope.field.add(
        name="ts_ms", number=5, type=message, type_name=".google.protobuf.Int64Value", label=optional
    )
    pool = descriptor_pool.DescriptorPool()
    for dependency in (timestamp_pb2, wrappers_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        dependency.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName("shop.orders.Envelope"))


def debezium_proto(registry_url: str, changes: Sequence[dict[str, Any]], topic: str = "t") -> list[bytes]:
    """Framed Debezium envelopes: each change {op, before, after, lsn, ts_ms} (rows: dicts of
    the orders columns, ``updated_at`` a datetime) on a fresh ``Envelope``."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    cls = orders_envelope_class()
    serialize = ProtobufSerializer(
        cls, SchemaRegistryClient({"url": registry_url}), {"use.deprecated.format": False}
    )
    context = SerializationContext(topic, MessageField.VALUE)

    def fill(target: Any, row: dict[str, Any]) -> None:
        target.order_id = row["order_id"]
        if row.get("customer_id") is not None:
            target.customer_id.value = row["customer_id"]
        if row.get("status") is not None:
            target.status = row["status"]
        target.amount = row.get("amount", "")
        target.updated_at.FromDatetime(row["updated_at"])

    out = []
    for change in changes:
        envelope = cls(op=change["op"])
        for side in ("before", "after"):
            if change.get(side) is not None:
                fill(getattr(envelope, side), change[side])
        envelope.source.db = "shop"
        if change.get("lsn") is not None:
            envelope.source.lsn.value = change["lsn"]
        if change.get("ts_ms") is not None:
            envelope.ts_ms.value = change["ts_ms"]
        out.append(serialize(envelope, context))
    return out
