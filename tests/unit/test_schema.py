from __future__ import annotations

import pytest

from tidemark.schema import parse_column

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("spec", "ddl", "nullable"),
    [
        ("string", "string", True),
        ("BIGINT not null", "bigint", False),
        ("long", "bigint", True),
        ("decimal(12,2)", "decimal(12,2)", True),
        ("decimal", "decimal(10,0)", True),
        ("varchar(20)", "string", True),
        ("timestamp_ntz", "timestamp_ntz", True),
        ("array<string>", "array<string>", True),
        ("map<string, bigint>", "map<string,bigint>", True),
        ("struct<a:int, b:array<double>> NOT NULL", "struct<a:int,b:array<double>>", False),
    ],
)
def test_parse_column(spec: str, ddl: str, nullable: bool) -> None:
    column = parse_column("c", spec)
    assert column.type.ddl() == ddl
    assert column.nullable is nullable


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("strng", "unknown type 'strng'"),
        ("decimal(40,2)", "out of range"),
        ("array<string", "unexpected end"),
        ("map<string>", "expected ','"),
        ("string nullable", "unexpected 'nullable'"),
        ("", "expected a Spark SQL type"),
    ],
)
def test_parse_column_errors_say_what_was_expected(spec: str, fragment: str) -> None:
    with pytest.raises(ValueError, match="expected") as info:
        parse_column("c", spec)
    assert fragment in str(info.value)


def test_bad_column_name() -> None:
    with pytest.raises(ValueError, match="column name"):
        parse_column("1bad", "string")
