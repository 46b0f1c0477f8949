"""Tables and the Schema Registry: a table YAML written from a subject's latest schema (the
first thing a new user does), and a table checked against its subject's versions, so a
mapping that cannot hold is found when the config is validated, naming the field, not record
by record.

The schema a YAML gets is Avro's own types in Spark SQL's (docs/configuration.md, "Source
types", read backwards): a field that is not a nullable union is ``not null``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from tidemark.avro_schema import Unresolvable, read_plan
from tidemark.ingest.decoders.protobuf_schema import WRAPPERS, field_kind, is_map, proto_plan, top_messages
from tidemark.ingest.registry import RegisteredSchema, SchemaRegistry

if TYPE_CHECKING:
    from tidemark.config import TableConfig

_SIMPLE = {
    "boolean": "boolean",
    "int": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "string": "string",
    "bytes": "binary",
    "enum": "string",
    "fixed": "binary",
}
_LOGICAL = {
    "timestamp-millis": "timestamp",
    "timestamp-micros": "timestamp",
    "timestamp-nanos": "timestamp",
    "local-timestamp-millis": "timestamp_ntz",
    "local-timestamp-micros": "timestamp_ntz",
    "local-timestamp-nanos": "timestamp_ntz",
    "date": "date",
    "uuid": "string",
}


@dataclass(frozen=True)
class SubjectVersion:
    """One registry version of a table's subject, and whether it reads into the table."""

    schema: RegisteredSchema
    problem: str | None

    def line(self) -> str:
        verdict = "reads into the table" if self.problem is None else f"REFUSED: {self.problem}"
        return f"{self.schema.subject} v{self.schema.version} (schema id {self.schema.schema_id}): {verdict}"


def subject_versions(config: TableConfig, *, latest_only: bool = False) -> list[SubjectVersion]:
    """The table's subject's versions (or its latest), each checked against the table's
    schema by Avro's resolution rules; a table without a registry has none."""
    registry_config = config.source.schema_registry
    if config.source.format not in {"avro", "protobuf"} or registry_config is None:
        return []
    serialized = config.source.format == "protobuf"
    registry = SchemaRegistry(config.table, registry_config.client_properties(), serialized=serialized)
    subject = config.source.subject
    found = [registry.latest(subject)] if latest_only else registry.versions(subject)
    return [SubjectVersion(s, _problem(s, config, registry)) for s in found]


def _problem(schema: RegisteredSchema, config: TableConfig, registry: SchemaRegistry) -> str | None:
    """Why the schema does not read into the table, or None."""
    if schema.schema_type != config.source.format.upper():
        return f"a {schema.schema_type} schema on a {config.source.format} table"
    try:
        if schema.schema_type == "PROTOBUF":
            return _proto_problem(schema, config, registry)
        else:
            read_plan(schema.text, config.schema_columns, config.source.conversions, envelope=config.envelope)
    except Unresolvable as exc:
        return str(exc)
    return None


def _proto_problem(schema: RegisteredSchema, config: TableConfig, registry: SchemaRegistry) -> str | None:
    """The table's message (``schema_registry.message``), or else any top-level message of
    the file, must read into the table."""

    assert config.source.schema_registry is not None
    wanted = config.source.schema_registry.message
    messages = top_messages(schema.text, registry.imports(schema))
    if wanted:
        messages = [m for m in messages if m.full_name == wanted]
        if not messages:
            return f"no top-level message {wanted}"
    problems = []
    for message in messages:
        try:
            proto_plan(message, config.schema_columns, config.source.conversions, config.envelope)
            return None
        except Unresolvable as exc:
            problems.append(f"{message.full_name}: {exc}")
    return "; ".join(problems) or "the file has no message"


def table_yaml(
    schema: RegisteredSchema,
    *,
    table: str,
    topic: str,
    registry_url: str,
    event_time: str | None = None,
    imports: dict[str, str] | None = None,
    message: str | None = None,
) -> str:
    """A table YAML for the subject's schema: its fields as the table's columns, the first
    timestamp field as the event time (unless named), everything else the defaults. For
    Protobuf, the file's ``message`` (needed when it has more than one top-level message)."""
    registry: dict[str, str] = {"url": registry_url, "subject": schema.subject}
    columns, full_name = subject_columns(schema, imports, message)
    if full_name:
        registry["message"] = full_name
    times = [n for n, t in columns.items() if t.split()[0] in {"timestamp", "timestamp_ntz"}]
    field = event_time or (times[0] if times else None)
    if field is None or field not in columns:
        raise ValueError(
            f"{schema.subject}: no timestamp field to route records by; name one with --event-time "
            f"(fields: {', '.join(columns)}), and declare its conversion in source.conversions if needed"
        )
    data = {
        "table": table,
        "description": f"From {schema.subject} v{schema.version} (schema id {schema.schema_id}).",
        "source": {
            "topic": topic,
            "format": schema.schema_type.lower(),
            "schema_registry": registry,
        },
        "schema": columns,
        "event_time": {"field": field},
    }
    return yaml.safe_dump(data, sort_keys=False)


def subject_columns(
    schema: RegisteredSchema, imports: dict[str, str] | None = None, message: str | None = None
) -> tuple[dict[str, str], str]:
    """The table columns (name -> Spark SQL type) a subject's schema reads into, and for
    Protobuf the full name of the message they come from (else "")."""
    if schema.schema_type == "AVRO":
        record = json.loads(schema.text)
        if not isinstance(record, dict) or record.get("type") != "record":
            raise ValueError(f"{schema.subject}: the schema is not a record")
        names: dict[str, Any] = {}
        return {f["name"]: _column(f["type"], names) for f in record["fields"]}, ""
    if schema.schema_type == "PROTOBUF":
        descriptor = _top_message(schema, imports or {}, message)
        return {f.name: _proto_column(f) for f in descriptor.fields}, descriptor.full_name
    raise ValueError(f"{schema.subject}: a {schema.schema_type} schema; Avro and Protobuf subjects are read")


def _column(schema: Any, names: dict[str, Any]) -> str:
    """The Spark SQL type (and ``not null``) of an Avro field's type."""
    nullable = False
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise ValueError(f"a union of {len(branches)} types has no column type; read it as one type")
        nullable, schema = len(branches) < len(schema), branches[0]
    return _type(schema, names) + ("" if nullable else " not null")


def _type(schema: Any, names: dict[str, Any]) -> str:
    if isinstance(schema, list):
        return _column(schema, names).removesuffix(" not null")
    if isinstance(schema, str):
        if schema in _SIMPLE:
            return _SIMPLE[schema]
        if schema in names:
            return _type(names[schema], names)
        raise ValueError(f"unknown named type {schema!r}")
    kind, logical = schema.get("type"), schema.get("logicalType")
    if "name" in schema:
        names[schema["name"]] = schema
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    if logical == "decimal":
        return f"decimal({schema['precision']},{schema.get('scale', 0)})"
    if kind == "record":
        fields = ",".join(f"{f['name']}:{_type(f['type'], names)}" for f in schema["fields"])
        return f"struct<{fields}>"
    if kind == "array":
        return f"array<{_type(schema['items'], names)}>"
    if kind == "map":
        return f"map<string,{_type(schema['values'], names)}>"
    return _type(kind, names)


def _top_message(schema: RegisteredSchema, imports: dict[str, str], wanted: str | None) -> Any:
    try:
        messages = top_messages(schema.text, imports)
    except Unresolvable as exc:
        raise ValueError(f"{schema.subject}: {exc}") from None
    names = [m.full_name for m in messages]
    if wanted:
        if wanted not in names:
            raise ValueError(
                f"{schema.subject}: no top-level message {wanted} (messages: {', '.join(names)})"
            )
        return messages[names.index(wanted)]
    if len(messages) != 1:
        raise ValueError(
            f"{schema.subject}: {len(messages)} top-level messages; name the topic's with --message "
            f"(messages: {', '.join(names)})"
        )
    return messages[0]


_PROTO_SCALARS = {
    "int32": "int",
    "int64": "bigint",
    "uint32": "bigint",
    "uint64": "bigint",
    "float": "float",
    "double": "double",
    "bool": "boolean",
    "string": "string",
    "bytes": "binary",
    "enum": "string",
}


def _proto_column(field: Any) -> str:
    """A field's Spark SQL type: ``not null`` unless it has presence (messages, ``optional``
    scalars, oneof members), since a proto3 scalar reads as its default when unset."""
    nullable = field.has_presence and not field.is_repeated
    return _proto_type(field) + ("" if nullable else " not null")


def _proto_type(field: Any, element: bool = False, inside: tuple[str, ...] = ()) -> str:
    if not element and is_map(field):
        value = field.message_type.fields_by_name["value"]
        return f"map<string,{_proto_type(value, True, inside)}>"
    if not element and field.is_repeated:
        return f"array<{_proto_type(field, True, inside)}>"
    kind = field_kind(field)
    if kind != "message":
        return _PROTO_SCALARS[kind]
    full = field.message_type.full_name
    if full == "google.protobuf.Timestamp":
        return "timestamp"
    if full in WRAPPERS:
        return _PROTO_SCALARS[WRAPPERS[full]]
    if full in inside:
        raise ValueError(f"field {field.name}: the recursive message {full} has no column type")
    children = ",".join(
        f"{f.name}:{_proto_type(f, False, (*inside, full))}" for f in field.message_type.fields
    )
    return f"struct<{children}>"
