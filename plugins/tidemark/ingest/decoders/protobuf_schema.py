"""How a Protobuf writer schema's fields are read into the table's columns, decided once per
writer schema and message type (docs/configuration.md, "Source types").

A column is read from the message's field of the same name: scalars into the Spark types that
hold them (``int32`` into int or wider, ``int64``/``uint32`` into bigint, ``uint64`` into bigint
range-checked, ``float``/``double``, ``bool``, ``string``, ``bytes`` into binary), enums as their
symbol's name, ``google.protobuf.Timestamp`` into ``timestamp``, the wrappers
(``Int64Value``...) into their scalar with null when unset, messages into structs by field
name, ``repeated`` into arrays, ``map`` into maps. A proto3 scalar without ``optional`` is never
null (its default when unset); ``optional`` fields, oneof members and messages are null when
unset. Anything else cannot be resolved (``schema_unresolvable``, naming the field).

The schema is the registry's serialized ``FileDescriptorProto`` (what the Confluent
serializers register; a registry converting it to text serves it back with
``format=serialized``). Its imports are Google's well-known types, or files registered as the
schema's references (as confluent-kafka's ``ProtobufSerializer`` registers them, each under
its own subject), read from the registry with it.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidemark.avro_schema import Unresolvable, require_nullable
from tidemark.schema import Column, SqlType

if TYPE_CHECKING:
    import pyarrow as pa

    from tidemark.conversions import Conversion
    from tidemark.envelopes import Envelope

Getter = Callable[[Any], Any]  # the Python value of a field of a parsed message (or None)

_INTS = {"tinyint", "smallint", "int", "bigint", "float", "double"}
WRAPPERS = {
    "google.protobuf.DoubleValue": "double",
    "google.protobuf.FloatValue": "float",
    "google.protobuf.Int64Value": "int64",
    "google.protobuf.UInt64Value": "uint64",
    "google.protobuf.Int32Value": "int32",
    "google.protobuf.UInt32Value": "uint32",
    "google.protobuf.BoolValue": "bool",
    "google.protobuf.StringValue": "string",
    "google.protobuf.BytesValue": "bytes",
}
_KINDS: dict[str, tuple[str, set[str]]] = {  # scalar kind -> (arrow type name, table types)
    "int32": ("int32", _INTS),
    "int64": ("int64", {"bigint", "float", "double"}),
    "uint32": ("int64", {"bigint", "float", "double"}),
    "uint64": ("uint64", {"bigint", "double"}),
    "float": ("float32", {"float", "double"}),
    "double": ("float64", {"double"}),
    "bool": ("bool_", {"boolean"}),
    "string": ("string", {"string"}),
    "bytes": ("binary", {"binary"}),
    "enum": ("string", {"string"}),
}


@dataclass(frozen=True)
class ProtoPlan:
    """How messages of one type are read: the message class, and per column its getter and the
    Arrow type of what the getter returns (None: not in the message). For a CDC envelope the
    getters read its row message (``row_type``), and ``added`` gives the Arrow type of what the
    envelope adds (op, version, its time)."""

    message_class: Any
    getters: dict[str, tuple[Getter, pa.DataType] | None]
    row_type: str | None = None
    added: dict[str, pa.DataType] = dataclasses.field(default_factory=dict)

    def source(self, column: str) -> pa.DataType | None:
        """The Arrow type of a column's values in a flat record (None: the writer lacks it)."""
        if column in self.added:
            return self.added[column]
        getter = self.getters.get(column)
        return getter[1] if getter is not None else None


def file_descriptor(schema_text: str, imports: Mapping[str, str] | None = None) -> Any:
    """A serialized file descriptor, in a pool of its own with the well-known types and the
    files it imports (``imports``: import path -> serialized file, from the schema's references)."""
    from google.protobuf import descriptor_pool

    proto = _file_proto(schema_text, "the writer schema")
    pool = descriptor_pool.DescriptorPool()
    _add_dependencies(pool, proto, imports or {}, set())
    try:
        return pool.Add(proto)
    except Exception as exc:
        raise Unresolvable(f"a file descriptor the runtime refuses: {exc}") from None


def top_messages(schema_text: str, imports: Mapping[str, str] | None = None) -> list[Any]:
    """The top-level message descriptors of a serialized file descriptor, in file order."""
    return list(file_descriptor(schema_text, imports).message_types_by_name.values())


def message_descriptor(schema_text: str, indexes: list[int], imports: Mapping[str, str] | None = None) -> Any:
    """The message descriptor at ``indexes`` (the wire format's message indexes) of a
    serialized file descriptor (:func:`file_descriptor`)."""
    types = top_messages(schema_text, imports)
    descriptor = None
    for depth, position in enumerate(indexes):
        if not 0 <= position < len(types):
            raise Unresolvable(f"message index {indexes} has no message at level {depth}")
        descriptor = types[position]
        types = list(descriptor.nested_types)
    if descriptor is None:
        raise Unresolvable("no message index")
    return descriptor


def _file_proto(text: str, what: str) -> Any:
    from google.protobuf import descriptor_pb2

    try:
        return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except Exception as exc:
        raise Unresolvable(
            f"{what} is not a serialized FileDescriptorProto ({type(exc).__name__}); read with format=serialized"
        ) from None


def _add_dependencies(pool: Any, proto: Any, imports: Mapping[str, str], added: set[str]) -> None:
    """Add what ``proto`` imports, each file after its own imports."""
    for dependency in proto.dependency:
        if dependency in added:
            continue
        added.add(dependency)
        if dependency.startswith("google/protobuf/"):
            _add_well_known(pool, dependency)
            continue
        text = imports.get(dependency)
        if text is None:
            raise Unresolvable(f"imports {dependency}, which none of the schema's references names")
        imported = _file_proto(text, f"import {dependency}")
        _add_dependencies(pool, imported, imports, added)
        try:
            pool.Add(imported)
        except Exception as exc:
            raise Unresolvable(f"import {dependency}: a file descriptor the runtime refuses: {exc}") from None


def _add_well_known(pool: Any, name: str) -> None:
    from google.protobuf import descriptor_pb2, descriptor_pool

    proto = descriptor_pb2.FileDescriptorProto()
    try:
        descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
    except KeyError:
        _import_well_known()
        descriptor_pool.Default().FindFileByName(name).CopyToProto(proto)
    for dependency in proto.dependency:
        _add_well_known(pool, dependency)
    with contextlib.suppress(TypeError):  # already there
        pool.Add(proto)


def _import_well_known() -> None:
    from google.protobuf import (  # noqa: F401 - registers them in the default pool
        any_pb2,
        duration_pb2,
        empty_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )


def proto_plan(
    descriptor: Any,
    columns: list[Column],
    conversions: dict[str, Conversion],
    envelope: Envelope | None = None,
) -> ProtoPlan:
    """The plan of a message type, or :class:`Unresolvable` naming the field at fault. With a
    CDC ``envelope`` the message is that envelope: the columns resolve against its row message."""
    import pyarrow as pa
    from google.protobuf.message_factory import GetMessageClass

    row = descriptor if envelope is None else envelope_row(descriptor, envelope)
    added: dict[str, pa.DataType] = {}
    if envelope is not None:
        kinds = {"string": pa.string(), "long": pa.int64()}
        added = {n: kinds[k] for n, (k, _) in envelope.added_fields(row.fields_by_name).items()}
    getters: dict[str, tuple[Getter, pa.DataType] | None] = {}
    for column in columns:
        field = row.fields_by_name.get(column.name)
        if column.name in added:  # the envelope's value, typed by ``added``
            getters[column.name] = None
            continue
        if field is None:
            require_nullable(column, f"message {row.full_name}")
            getters[column.name] = None
            continue
        conversion = conversions.get(column.name)
        target = SqlType("string") if conversion and conversion.source == "text" else column.type
        if conversion is not None and conversion.source != "text":
            target = SqlType("double")
        getter, arrow = _field(field, target, column.name)
        getters[column.name] = (getter, arrow)
    row_type = row.full_name if envelope is not None else None
    return ProtoPlan(GetMessageClass(descriptor), getters, row_type, added)


def envelope_row(descriptor: Any, envelope: Envelope) -> Any:
    """The row message type of an envelope message type (Canal's: of its repeated field)."""
    fields = descriptor.fields_by_name
    if any(name not in fields for name in envelope.required_fields):
        raise Unresolvable(envelope.not_this_envelope())
    holder = fields[envelope.row_field]
    if holder.message_type is None or is_map(holder):
        raise Unresolvable(f"field {holder.name}: not a message")
    if holder.is_repeated != envelope.shape.rows_listed:
        raise Unresolvable(
            f"field {holder.name}: "
            + ("not a repeated message of rows" if envelope.shape.rows_listed else "repeated, not one row")
        )
    return holder.message_type


def _field(field: Any, sql: SqlType, path: str) -> tuple[Getter, pa.DataType]:
    """Getter and Arrow type of a field of a message (presence, repetition, maps)."""
    import pyarrow as pa

    name = field.name
    if is_map(field):
        if sql.name != "map" or sql.children[0].name != "string":
            raise Unresolvable(f"field {path}: a Protobuf map cannot be read as {sql.ddl()}")
        key_field, value_field = (
            field.message_type.fields_by_name["key"],
            field.message_type.fields_by_name["value"],
        )
        if field_kind(key_field) != "string":
            raise Unresolvable(
                f"field {path}: map keys of {field_kind(key_field)} are not read (string keys only)"
            )
        value, value_type = _value(value_field, sql.children[1], f"{path}{{}}")
        return (lambda m: [(k, value(v)) for k, v in getattr(m, name).items()]), pa.map_(
            pa.string(), value_type
        )
    if field.is_repeated:
        if sql.name != "array":
            raise Unresolvable(f"field {path}: a repeated field cannot be read as {sql.ddl()}")
        value, value_type = _value(field, sql.children[0], f"{path}[]")
        return (lambda m: [value(v) for v in getattr(m, name)]), pa.list_(value_type)
    value, value_type = _value(field, sql, path)
    if field.has_presence:  # messages, optional scalars, oneof members: null when unset
        return (lambda m: value(getattr(m, name)) if m.HasField(name) else None), value_type
    return (lambda m: value(getattr(m, name))), value_type


def _value(field: Any, sql: SqlType, path: str) -> tuple[Getter, pa.DataType]:
    """Converter and Arrow type of one value of a field (an element, for repeated ones)."""
    import pyarrow as pa

    kind = field_kind(field)
    if kind == "message":
        full = field.message_type.full_name
        if full == "google.protobuf.Timestamp":
            if sql.name != "timestamp":
                raise Unresolvable(f"field {path}: a Timestamp cannot be read as {sql.ddl()}")
            return (lambda t: t.seconds * 1_000_000 + t.nanos // 1000), pa.timestamp("us", tz="UTC")
        if full in WRAPPERS:
            arrow_name, allowed = _KINDS[WRAPPERS[full]]
            if sql.name not in allowed:
                raise Unresolvable(f"field {path}: a {full.rsplit('.', 1)[1]} cannot be read as {sql.ddl()}")
            return (lambda w: w.value), getattr(pa, arrow_name)()
        if sql.name != "struct":
            raise Unresolvable(f"field {path}: message {full} cannot be read as {sql.ddl()}")
        children: list[tuple[str, Getter]] = []
        arrow_fields = []
        for child_name, child_sql in sql.fields:
            child = field.message_type.fields_by_name.get(child_name)
            if child is None:
                arrow_fields.append(pa.field(child_name, child_sql.to_arrow()))
                continue
            getter, arrow = _field(child, child_sql, f"{path}.{child_name}")
            children.append((child_name, getter))
            arrow_fields.append(pa.field(child_name, arrow))
        return (lambda m: {n: g(m) for n, g in children}), pa.struct(arrow_fields)
    arrow_name, allowed = _KINDS[kind]
    if sql.name not in allowed:
        raise Unresolvable(f"field {path}: Protobuf {kind} cannot be read as {sql.ddl()}")
    if kind == "enum":
        names = {v.number: v.name for v in field.enum_type.values}
        return (lambda n: names.get(n, str(n))), pa.string()
    return (lambda v: v), getattr(pa, arrow_name)()


def is_map(field: Any) -> bool:
    return bool(
        field.is_repeated and field.message_type is not None and field.message_type.GetOptions().map_entry
    )


def field_kind(field: Any) -> str:
    from google.protobuf.descriptor import FieldDescriptor as F

    kinds = {
        F.TYPE_INT32: "int32",
        F.TYPE_SINT32: "int32",
        F.TYPE_SFIXED32: "int32",
        F.TYPE_INT64: "int64",
        F.TYPE_SINT64: "int64",
        F.TYPE_SFIXED64: "int64",
        F.TYPE_UINT32: "uint32",
        F.TYPE_FIXED32: "uint32",
        F.TYPE_UINT64: "uint64",
        F.TYPE_FIXED64: "uint64",
        F.TYPE_FLOAT: "float",
        F.TYPE_DOUBLE: "double",
        F.TYPE_BOOL: "bool",
        F.TYPE_STRING: "string",
        F.TYPE_BYTES: "bytes",
        F.TYPE_ENUM: "enum",
        F.TYPE_MESSAGE: "message",
    }
    kind = kinds.get(field.type)
    if kind is None:
        raise Unresolvable(f"field {field.name}: Protobuf type {field.type} (groups) is not read")
    return kind
