"""Column types of a table schema, parsed without a JVM.

Table YAML files declare columns with Spark SQL type names (``bigint``, ``decimal(12,2)``,
``array<string>``, ``struct<a:int,b:string>``). DAG files load these configs at parse time,
where starting a JVM to ask Spark's own DDL parser is out of the question, so this module
parses the (small) type grammar itself and converts to ``pyspark.sql.types`` lazily.
An integration test checks that Spark's parser agrees on the example tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

# Spark type names and their aliases -> canonical name.
_PRIMITIVES = {
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "tinyint": "tinyint",
    "byte": "tinyint",
    "smallint": "smallint",
    "short": "smallint",
    "int": "int",
    "integer": "int",
    "bigint": "bigint",
    "long": "bigint",
    "float": "float",
    "real": "float",
    "double": "double",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "binary": "binary",
}
_DECIMALS = {"decimal", "dec", "numeric"}
_SIZED_STRINGS = {"varchar", "char"}
TIMESTAMP_TYPES = {"timestamp", "timestamp_ntz"}
TYPE_HINT = (
    "a Spark SQL type such as string, bigint, double, boolean, date, timestamp, decimal(12,2), "
    "array<string>, map<string,bigint> or struct<a:int,b:string>, optionally followed by 'not null'"
)

_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|(\d+)|(.))")


@dataclass(frozen=True)
class SqlType:
    """A parsed Spark SQL type: ``name`` is canonical, ``params`` holds decimal precision/scale,
    ``children`` the element/key/value types, ``fields`` the struct members."""

    name: str
    params: tuple[int, ...] = ()
    children: tuple[SqlType, ...] = ()
    fields: tuple[tuple[str, SqlType], ...] = ()

    def ddl(self) -> str:
        """The canonical Spark DDL spelling, e.g. ``decimal(12,2)``."""
        if self.name == "decimal":
            return f"decimal({self.params[0]},{self.params[1]})"
        if self.name == "array":
            return f"array<{self.children[0].ddl()}>"
        if self.name == "map":
            return f"map<{self.children[0].ddl()},{self.children[1].ddl()}>"
        if self.name == "struct":
            return "struct<" + ",".join(f"{n}:{t.ddl()}" for n, t in self.fields) + ">"
        return self.name

    def holds(self, name: str) -> bool:
        """This type is ``name`` or has a ``name`` inside (an element, a value, a field)."""
        return (
            self.name == name
            or any(c.holds(name) for c in self.children)
            or any(t.holds(name) for _, t in self.fields)
        )

    def to_spark(self) -> DataType:
        """The equivalent ``pyspark.sql.types`` object (imports pyspark lazily)."""
        from pyspark.sql import types as T

        simple: dict[str, type[DataType]] = {
            "string": T.StringType,
            "boolean": T.BooleanType,
            "tinyint": T.ByteType,
            "smallint": T.ShortType,
            "int": T.IntegerType,
            "bigint": T.LongType,
            "float": T.FloatType,
            "double": T.DoubleType,
            "date": T.DateType,
            "timestamp": T.TimestampType,
            "timestamp_ntz": T.TimestampNTZType,
            "binary": T.BinaryType,
        }
        if self.name in simple:
            return simple[self.name]()
        if self.name == "decimal":
            return T.DecimalType(self.params[0], self.params[1])
        if self.name == "array":
            return T.ArrayType(self.children[0].to_spark(), containsNull=True)
        if self.name == "map":
            return T.MapType(self.children[0].to_spark(), self.children[1].to_spark(), valueContainsNull=True)
        return T.StructType([T.StructField(n, t.to_spark(), True) for n, t in self.fields])

    def to_arrow(self) -> pa.DataType:
        """The Arrow type of the files tidemark writes (Spark reads each back as ``to_spark``):
        timestamps are microseconds, UTC-adjusted for ``timestamp``, local for ``timestamp_ntz``."""
        import pyarrow as pa

        simple = {
            "string": pa.string(),
            "boolean": pa.bool_(),
            "tinyint": pa.int8(),
            "smallint": pa.int16(),
            "int": pa.int32(),
            "bigint": pa.int64(),
            "float": pa.float32(),
            "double": pa.float64(),
            "date": pa.date32(),
            "timestamp": pa.timestamp("us", tz="UTC"),
            "timestamp_ntz": pa.timestamp("us"),
            "binary": pa.binary(),
        }
        if self.name in simple:
            return simple[self.name]
        if self.name == "decimal":
            return pa.decimal128(self.params[0], self.params[1])
        if self.name == "array":
            return pa.list_(self.children[0].to_arrow())
        if self.name == "map":
            return pa.map_(self.children[0].to_arrow(), self.children[1].to_arrow())
        return pa.struct([pa.field(n, t.to_arrow()) for n, t in self.fields])

    def json_problem(self) -> str | None:
        """Why JSON values cannot be read into this type, or None: the JSON reader (pyarrow)
        converts no maps, and dates only at the top level (parsed from ``YYYY-MM-DD``)."""
        if self.name == "map":
            return f"{self.ddl()}: JSON maps are not supported; declare a struct<...> of the known keys"
        for child in (*self.children, *(t for _, t in self.fields)):
            if child.name == "date":
                return f"{self.ddl()}: a date inside an array or struct is not supported; use string"
            problem = child.json_problem()
            if problem:
                return problem
        return None


@dataclass(frozen=True)
class Column:
    """One column of a table schema."""

    name: str
    type: SqlType
    nullable: bool = True
    comment: str = field(default="", compare=False)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = [m.group(m.lastindex or 0) for m in _TOKEN.finditer(text.strip()) if m.lastindex]
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ValueError(f"unexpected end of type {self.text!r}")
        self.pos += 1
        return tok

    def expect(self, symbol: str) -> None:
        tok = self.take()
        if tok != symbol:
            raise ValueError(f"expected {symbol!r} but found {tok!r} in {self.text!r}")

    def number(self) -> int:
        tok = self.take()
        if not tok.isdigit():
            raise ValueError(f"expected a number but found {tok!r} in {self.text!r}")
        return int(tok)

    def parse_type(self) -> SqlType:
        word = self.take()
        lower = word.lower()
        if lower in _PRIMITIVES:
            return SqlType(_PRIMITIVES[lower])
        if lower in _SIZED_STRINGS:
            self.expect("(")
            self.number()
            self.expect(")")
            return SqlType("string")
        if lower in _DECIMALS:
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take()
                precision = self.number()
                if self.peek() == ",":
                    self.take()
                    scale = self.number()
                self.expect(")")
            if not 1 <= precision <= 38 or scale > precision:
                raise ValueError(
                    f"decimal({precision},{scale}) is out of range (precision 1-38, scale <= precision)"
                )
            return SqlType("decimal", (precision, scale))
        if lower == "array":
            self.expect("<")
            element = self.parse_type()
            self.expect(">")
            return SqlType("array", children=(element,))
        if lower == "map":
            self.expect("<")
            key = self.parse_type()
            self.expect(",")
            value = self.parse_type()
            self.expect(">")
            return SqlType("map", children=(key, value))
        if lower == "struct":
            self.expect("<")
            members: list[tuple[str, SqlType]] = []
            while True:
                name = self.take()
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                    raise ValueError(f"bad struct field name {name!r} in {self.text!r}")
                self.expect(":")
                members.append((name, self.parse_type()))
                if self.peek() == ",":
                    self.take()
                    continue
                self.expect(">")
                return SqlType("struct", fields=tuple(members))
        raise ValueError(f"unknown type {word!r}")


def parse_column(name: str, spec: str) -> Column:
    """Parse ``"decimal(12,2) not null"`` into a Column; ValueError says what was expected."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(
            f"column name {name!r} must be letters, digits and underscores, not starting with a digit"
        )
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"expected {TYPE_HINT}, got {spec!r}")
    parser = _Parser(spec)
    try:
        sql_type = parser.parse_type()
        nullable = True
        rest = [t.lower() for t in parser.tokens[parser.pos :]]
        if rest == ["not", "null"]:
            nullable = False
        elif rest:
            raise ValueError(f"unexpected {' '.join(parser.tokens[parser.pos :])!r} after the type")
    except ValueError as exc:
        raise ValueError(f"cannot parse type {spec!r}: {exc}; expected {TYPE_HINT}") from None
    return Column(name=name, type=sql_type, nullable=nullable)


def to_struct(columns: list[Column]) -> StructType:
    """The Spark schema of a list of columns."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(c.name, c.type.to_spark(), c.nullable) for c in columns])


def arrow_schema_of(fields: list[tuple[str, str]]) -> pa.Schema:
    """The Arrow schema Spark hands a task for rows of ``(name, Spark type)`` fields, every
    field nullable (as Spark's DDL parser reads them), parsed without a JVM."""
    import pyarrow as pa

    return pa.schema([pa.field(name, _Parser(spec).parse_type().to_arrow()) for name, spec in fields])
