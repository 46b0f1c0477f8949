"""Avro's resolution rules, applied once per writer schema: how each of the table's columns
is read from a writer schema's fields (docs/configuration.md, "Source types").

A column is read from the writer's field of the same name, through Avro's promotions (int to
long, float or double; long to float or double; float to double; string to bytes), nullable
unions (``["null", T]``), records into structs by field name, arrays, maps with string keys,
enums as strings, and the logical types: ``timestamp-millis``/``-micros``/``-nanos`` into
``timestamp``, ``local-timestamp-*`` into ``timestamp_ntz``, ``date``, ``decimal`` (bytes or
fixed) into a decimal of the same scale and no fewer integer digits, ``uuid`` as a string.
A column the writer lacks is null (a ``not null`` one makes the schema unresolvable); a field
the table lacks is ignored. Anything else cannot be resolved, and every record written with
that schema is dirty ``schema_unresolvable`` with the field and the reason.

fastavro decodes the logical types the Arrow conversion takes as numbers (timestamps, dates,
uuids as text) without building Python objects: they are removed from the schema it reads with.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidemark.conversions import source_type
from tidemark.schema import Column, SqlType

if TYPE_CHECKING:
    import pyarrow as pa

    from tidemark.conversions import Conversion
    from tidemark.envelopes import Envelope

# logical types fastavro need not build objects for: the Arrow type reads their numbers
AS_NUMBERS = {
    "timestamp-millis",
    "timestamp-micros",
    "timestamp-nanos",
    "local-timestamp-millis",
    "local-timestamp-micros",
    "local-timestamp-nanos",
    "date",
    "time-millis",
    "time-micros",
    "uuid",
}
_UNITS = {"millis": "ms", "micros": "us", "nanos": "ns"}
_PROMOTIONS = {  # writer primitive -> table types it is read into
    "boolean": {"boolean"},
    "int": {"tinyint", "smallint", "int", "bigint", "float", "double"},
    "long": {"bigint", "float", "double"},
    "float": {"float", "double"},
    "double": {"double"},
    "string": {"string", "binary"},
    "bytes": {"binary"},
    "enum": {"string"},
    "fixed": {"binary"},
}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


class Unresolvable(ValueError):
    """A writer schema cannot be read into the table schema; names the field."""


def require_nullable(column: Column, where: str) -> None:
    """A column the writer does not have reads as null: refused for a ``not null`` one."""
    if not column.nullable:
        raise Unresolvable(f"field {column.name}: not in {where}, and the column is not null")


@dataclass(frozen=True)
class ReadPlan:
    """How records of one writer schema are read: ``schema`` is what fastavro decodes with,
    ``sources`` the Arrow type of each column's decoded values (None: not in the writer),
    ``writer_text`` the writer schema itself, self-contained (references inlined)."""

    schema: Any
    sources: dict[str, pa.DataType | None]
    writer_text: str = ""


def inline_references(writer_text: str, imports: dict[str, str]) -> str:
    """The writer schema with every named type it takes from a referenced schema (a registry
    reference: ``imports``, full name -> schema text) defined in place at its first use, as
    Avro requires a name to be defined before it is used: one self-contained schema that any
    reader (fastavro, the columnar one) takes alone."""
    if not imports:
        return writer_text
    referenced: dict[str, Any] = {}
    for name, text in imports.items():
        try:
            schema = json.loads(text)
        except ValueError as exc:
            raise Unresolvable(f"referenced schema {name}: not JSON: {exc}") from None
        referenced[name] = schema
        if isinstance(schema, dict) and "name" in schema:
            space = schema.get("namespace", "")
            full = schema["name"] if "." in schema["name"] or not space else f"{space}.{schema['name']}"
            referenced.setdefault(full, schema)
    try:
        writer = json.loads(writer_text)
    except ValueError as exc:
        raise Unresolvable(f"not an Avro schema: {exc}") from None
    defined: set[str] = set()

    def walk(node: Any, namespace: str) -> Any:
        if isinstance(node, str):
            full = node if "." in node or not namespace else f"{namespace}.{node}"
            for key in (node, full):
                if key in referenced and key not in defined and node not in _PRIMITIVES:
                    definition = copy.deepcopy(referenced[key])
                    return walk(definition, definition.get("namespace", namespace))
            return node
        if isinstance(node, list):
            return [walk(branch, namespace) for branch in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        if kind in {"record", "error", "enum", "fixed"} and "name" in node:
            space = node.get("namespace", namespace)
            name = node["name"]
            defined.update({name, name if "." in name or not space else f"{space}.{name}"})
            namespace = space
        out = dict(node)
        if isinstance(kind, dict | list) or (isinstance(kind, str) and kind not in _PRIMITIVES and kind not in {
            "record", "error", "enum", "fixed", "array", "map",
        }):  # fmt: skip
            out["type"] = walk(kind, namespace)
        if "fields" in node:
            out["fields"] = [{**f, "type": walk(f["type"], namespace)} for f in node["fields"]]
        if "items" in node:
            out["items"] = walk(node["items"], namespace)
        if "values" in node:
            out["values"] = walk(node["values"], namespace)
        return out

    return json.dumps(walk(writer, writer.get("namespace", "") if isinstance(writer, dict) else ""))


def read_plan(
    writer_text: str,
    columns: list[Column],
    conversions: dict[str, Conversion],
    *,
    envelope: Envelope | None = None,
) -> ReadPlan:
    """The plan of a writer schema, or :class:`Unresolvable` naming the field at fault. With
    a CDC ``envelope`` the writer schema is that envelope: the columns are read from its row
    record (Debezium's ``after``/``before``, Maxwell's ``data``, Canal's ``data`` items), op,
    version and the envelope's time from the envelope (``envelopes.py``)."""
    import fastavro

    try:
        writer = json.loads(writer_text)
    except ValueError as exc:
        raise Unresolvable(f"not an Avro schema: {exc}") from None
    names: dict[str, Any] = {}
    top = _named(writer, names, "")
    if not isinstance(top, dict) or top.get("type") != "record":
        raise Unresolvable("the writer schema is not a record")
    fields = {f["name"]: f["type"] for f in top.get("fields", [])}
    if envelope is not None:
        fields = _envelope_fields(fields, names, envelope)
    sources: dict[str, pa.DataType | None] = {}
    for column in columns:
        if column.name not in fields:
            require_nullable(column, "the writer schema")
            sources[column.name] = None
            continue
        conversion = conversions.get(column.name)
        if conversion is not None:
            sources[column.name] = _converted_source(fields[column.name], conversion, names, column.name)
        else:
            sources[column.name] = _source(fields[column.name], column.type, names, column.name)
    try:
        parsed = fastavro.parse_schema(_numbers_only(writer))
    except Exception as exc:  # fastavro's SchemaParseException and friends
        raise Unresolvable(f"not a valid Avro schema: {exc}") from None
    return ReadPlan(parsed, sources, writer_text)


def _envelope_fields(
    envelope_fields: dict[str, Any], names: dict[str, Any], envelope: Envelope
) -> dict[str, Any]:
    """The fields a flat record of ``envelope`` has: the row's, op, version, the envelope's time."""
    if any(f not in envelope_fields for f in envelope.required_fields):
        raise Unresolvable(envelope.not_this_envelope())
    where = envelope.row_field
    row = _unwrap(envelope_fields[where], names, where)
    if envelope.shape.rows_listed:
        if not isinstance(row, dict) or row.get("type") != "array":
            raise Unresolvable(f"field {where}: not an array of rows")
        where, row = f"{where}[]", _unwrap(row["items"], names, f"{where}[]")
    if not isinstance(row, dict) or row.get("type") != "record":
        raise Unresolvable(f"field {where}: not a record")
    fields = {f["name"]: f["type"] for f in row.get("fields", [])}
    for name, (kind, nullable) in envelope.added_fields(fields).items():
        fields[name] = ["null", kind] if nullable else kind
    return fields


def named_types(schema: Any) -> dict[str, Any]:
    """Every named type a schema defines, by full and by given name."""
    names: dict[str, Any] = {}
    _named(schema, names, "")
    return names


def _named(schema: Any, names: dict[str, Any], namespace: str) -> Any:
    """``schema`` with named references resolved at the top; registers every named type."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return schema
        found = names.get(schema) or names.get(f"{namespace}.{schema}")
        if found is None:
            raise Unresolvable(f"unknown named type {schema!r}")
        return found
    if isinstance(schema, dict) and schema.get("type") in {"record", "error", "enum", "fixed"}:
        space = schema.get("namespace", namespace)
        name = schema["name"]
        full = name if "." in name else (f"{space}.{name}" if space else name)
        names[full] = names[name] = schema
        if schema["type"] in {"record", "error"}:
            for f in schema.get("fields", []):
                _register(f["type"], names, space)
    return schema


def _register(schema: Any, names: dict[str, Any], namespace: str) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _register(branch, names, namespace)
    elif isinstance(schema, dict):
        if schema.get("type") in {"record", "error", "enum", "fixed"}:
            _named(schema, names, namespace)
        elif schema.get("type") == "array":
            _register(schema["items"], names, namespace)
        elif schema.get("type") == "map":
            _register(schema["values"], names, namespace)


def _unwrap(schema: Any, names: dict[str, Any], path: str) -> Any:
    """A nullable union's one type; the type itself otherwise."""
    schema = _named(schema, names, "")
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise Unresolvable(f"field {path}: a union of {len(branches)} types; only [null, T] is read")
        return _named(branches[0], names, "")
    return schema


def _kind(schema: Any) -> tuple[str, str | None]:
    """(Avro type name, logical type) of a resolved, non-union schema."""
    if isinstance(schema, str):
        return schema, None
    kind = schema.get("type")
    if isinstance(kind, dict | list) or (
        isinstance(kind, str)
        and kind not in _PRIMITIVES
        and kind not in {"record", "error", "enum", "fixed", "array", "map"}
    ):
        raise Unresolvable(f"unexpected schema {json.dumps(schema)[:80]}")
    return kind, schema.get("logicalType")


def _source(schema: Any, sql: SqlType, names: dict[str, Any], path: str) -> pa.DataType:
    """The Arrow type of the values fastavro returns for ``schema`` (logical types as numbers),
    from which a cast gives ``sql``; :class:`Unresolvable` when Avro cannot read one into the other."""
    import pyarrow as pa

    schema = _unwrap(schema, names, path)
    kind, logical = _kind(schema)
    target = sql.name

    def refuse() -> Unresolvable:
        written = f"{kind} ({logical})" if logical else kind
        return Unresolvable(f"field {path}: Avro {written} cannot be read as {sql.ddl()}")

    if logical in {"timestamp-millis", "timestamp-micros", "timestamp-nanos"}:
        if target != "timestamp":
            raise refuse()
        return pa.timestamp(_UNITS[logical.rsplit("-", 1)[1]], tz="UTC")
    if logical in {"local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos"}:
        if target != "timestamp_ntz":
            raise refuse()
        return pa.timestamp(_UNITS[logical.rsplit("-", 1)[1]])
    if logical == "date" and kind == "int":
        if target != "date":
            raise refuse()
        return pa.date32()
    if logical == "decimal" and kind in {"bytes", "fixed"}:
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if target != "decimal" or sql.params[1] != scale or sql.params[0] - sql.params[1] < precision - scale:
            raise refuse()
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(precision, scale)
    if kind in {"record", "error"}:
        if target != "struct":
            raise refuse()
        fields = {f["name"]: f["type"] for f in schema.get("fields", [])}
        children = []
        for name, child in sql.fields:
            if name in fields:
                children.append(pa.field(name, _source(fields[name], child, names, f"{path}.{name}")))
            else:
                children.append(pa.field(name, child.to_arrow()))  # absent: null
        return pa.struct(children)
    if kind == "array":
        if target != "array":
            raise refuse()
        return pa.list_(_source(schema["items"], sql.children[0], names, f"{path}[]"))
    if kind == "map":
        if target != "map" or sql.children[0].name != "string":
            raise refuse()
        return pa.map_(pa.string(), _source(schema["values"], sql.children[1], names, f"{path}{{}}"))
    if target not in _PROMOTIONS.get(kind, set()):
        raise refuse()
    return {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "string": pa.string(),
        "bytes": pa.binary(),
        "enum": pa.string(),
        "fixed": pa.binary(),
    }[kind]


def _converted_source(schema: Any, conversion: Conversion, names: dict[str, Any], path: str) -> pa.DataType:
    """A declared conversion reads epoch numbers from Avro numbers, text from strings."""

    kind, logical = _kind(_unwrap(schema, names, path))
    wanted = {"int", "long", "float", "double"} if conversion.source != "text" else {"string"}
    if kind not in wanted or logical not in {None, "uuid"}:
        raise Unresolvable(f"field {path}: Avro {kind} cannot be converted {conversion.describe()}")
    return source_type(conversion)


def _numbers_only(schema: Any) -> Any:
    """A copy of ``schema`` without the logical types read as numbers (see :data:`AS_NUMBERS`)."""
    out = copy.deepcopy(schema)

    def strip(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                strip(item)
        elif isinstance(node, dict):
            if node.get("logicalType") in AS_NUMBERS:
                del node["logicalType"]
            for value in node.values():
                if isinstance(value, dict | list):
                    strip(value)

    strip(out)
    return out
