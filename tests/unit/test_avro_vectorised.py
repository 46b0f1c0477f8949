"""The vectorised Avro read (``avro_block.py``) against the record-by-record one: random
records under random writer schemas (unions, logical types, maps, arrays, nested records,
decimals, enums, fixed), some of the messages corrupted (truncated, with trailing bytes,
bytes flipped), give the same rows, the same mismatches and the same verdicts both ways; and a
clean block of a schema the reader takes is really read in one call."""

from __future__ import annotations

import io
import json
import random
import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import fastavro  # noqa: TID253
import pytest

from tidemark.ingest.decoders import Decoded, avro
from tidemark.ingest.decoders.avro import AvroDecoder
from tidemark.ingest.decoders.avro_block import decode_records
from tidemark.ingest.registry import RegisteredSchema, SchemaFile
from tidemark.ingest.registry_tables import subject_columns
from tidemark.schema import Column, parse_column

pytestmark = pytest.mark.unit

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Schemas:
    """Random Avro types and values of them (one generator per seed)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.names = 0

    def name(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def type(self, depth: int = 0) -> Any:
        r = self.rng
        choices = ["boolean", "int", "long", "float", "double", "string", "bytes", "logical", "enum", "fixed"]
        if depth < 2:
            choices += ["record", "array", "nullable", "nullable", "map"]
        if depth == 0:
            choices += ["union"]
        kind = r.choice(choices)
        if kind == "logical":
            return r.choice(
                [
                    {"type": "int", "logicalType": "date"},
                    {"type": "long", "logicalType": "timestamp-millis"},
                    {"type": "long", "logicalType": "timestamp-micros"},
                    {"type": "long", "logicalType": "timestamp-nanos"},
                    {"type": "long", "logicalType": "local-timestamp-millis"},
                    {"type": "long", "logicalType": "local-timestamp-micros"},
                    {"type": "string", "logicalType": "uuid"},
                    {"type": "int", "logicalType": "time-millis"},
                    {"type": "bytes", "logicalType": "decimal", "precision": r.randint(1, 38), "scale": 2},
                    {"type": "fixed", "name": self.name("Money"), "size": 16, "logicalType": "decimal",
                     "precision": r.randint(3, 38), "scale": 3},
                ]
            )  # fmt: skip
        if kind == "enum":
            return {
                "type": "enum",
                "name": self.name("Kind"),
                "symbols": [f"s{i}" for i in range(r.randint(1, 70))],
            }
        if kind == "fixed":
            return {"type": "fixed", "name": self.name("Raw"), "size": r.randint(1, 8)}
        if kind == "record":
            return self.record(depth + 1)
        if kind == "array":
            return {"type": "array", "items": self.type(depth + 1)}
        if kind == "map":
            return {"type": "map", "values": self.type(depth + 1)}
        if kind == "nullable":
            inner = self.type(depth + 1)
            while isinstance(inner, list):  # a union in a union is not Avro
                inner = self.type(depth + 1)
            return ["null", inner] if r.random() < 0.7 else [inner, "null"]
        if kind == "union":
            return ["null", "string", "long"]
        return kind

    def record(self, depth: int = 0) -> dict[str, Any]:
        fields = [{"name": f"f{i}", "type": self.type(depth)} for i in range(self.rng.randint(1, 5))]
        return {"type": "record", "name": self.name("R"), "fields": fields}

    def value(self, schema: Any) -> Any:
        r = self.rng
        if isinstance(schema, list):
            branches = [b for b in schema if b != "null"]
            if "null" in schema and r.random() < 0.3:
                return None
            branch = r.choice(branches)
            return r.choice(["x", "ü", ""]) if branch == "string" else self.value(branch)
        if isinstance(schema, str):
            return {
                "boolean": lambda: r.random() < 0.5,
                "int": lambda: r.choice(
                    [0, -1, 63, -64, 64, 2**31 - 1, -(2**31), r.randint(-(10**6), 10**6)]
                ),
                "long": lambda: r.choice([0, 2**63 - 1, -(2**63), r.randint(-(2**40), 2**40)]),
                "float": lambda: r.choice([0.0, 1.5, -2.25]),
                "double": lambda: r.random() * 1e6,
                "string": lambda: "".join(r.choice("aé€😀 ") for _ in range(r.randint(0, 70))),
                "bytes": lambda: bytes(r.randrange(256) for _ in range(r.randint(0, 130))),
            }[schema]()
        logical, kind = schema.get("logicalType"), schema["type"]
        if logical == "date":
            return date(1970, 1, 1) + timedelta(days=r.randint(-30000, 30000))
        if logical in ("timestamp-millis", "timestamp-micros"):
            return EPOCH + timedelta(microseconds=r.randint(-(10**15), 10**16) // 1000 * 1000)
        if logical == "timestamp-nanos" or logical == "local-timestamp-millis":
            return (
                r.randint(-(10**17), 10**18) if logical == "timestamp-nanos" else r.randint(-(10**12), 10**13)
            )
        if logical == "local-timestamp-micros":
            return r.randint(-(10**15), 10**16)
        if logical == "uuid":
            return str(uuid.UUID(int=r.getrandbits(128)))
        if logical == "time-millis":
            return time(r.randint(0, 23), r.randint(0, 59), r.randint(0, 59), r.randint(0, 999) * 1000)
        if logical == "decimal":
            digits = r.randint(0, int(schema["precision"]))
            unscaled = r.randint(-(10**digits) + 1, 10**digits - 1) if digits else 0
            return Decimal(unscaled).scaleb(-int(schema.get("scale", 0)))
        if kind == "enum":
            return r.choice(schema["symbols"])
        if kind == "fixed":
            return bytes(r.randrange(256) for _ in range(schema["size"]))
        if kind == "record":
            return {f["name"]: self.value(f["type"]) for f in schema["fields"]}
        if kind == "array":
            return [self.value(schema["items"]) for _ in range(r.choice([0, 1, 3, 70]))]
        if kind == "map":
            return {f"k{i}": self.value(schema["values"]) for i in range(r.choice([0, 2]))}
        raise AssertionError(schema)


def columns_of(writer: dict[str, Any], rng: random.Random) -> list[Column]:
    """The table's columns: those of the writer's fields that have one (a random subset),
    and one column the writer lacks."""
    columns = []
    for field in writer["fields"]:
        one = {**writer, "fields": [field]}
        try:
            found, _ = subject_columns(RegisteredSchema(1, "AVRO", json.dumps(one)))
        except ValueError:  # a union of several types has no column: the table lacks it
            continue
        if rng.random() < 0.8:
            columns += [parse_column(name, ddl) for name, ddl in found.items()]
    return [*columns, parse_column("absent", "string")]


def corrupt(body: bytes, rng: random.Random) -> bytes:
    how = rng.choice(["truncate", "trail", "flip", "empty"])
    if how == "truncate" and body:
        return body[: rng.randrange(len(body))]
    if how == "trail":
        return body + bytes([rng.randrange(256)])
    if how == "flip" and body:
        i = rng.randrange(len(body))
        return body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1 :]
    return b""


def decoded(writer: dict[str, Any], columns: list[Column], bodies: list[bytes], vectorised: bool) -> Decoded:
    previous = avro.VECTORISED
    avro.VECTORISED = vectorised
    try:
        decoder = AvroDecoder(columns, {}, SchemaFile(json.dumps(writer)), framed=False)
        return decoder.decode(bodies, list(range(len(bodies))))
    finally:
        avro.VECTORISED = previous


def as_rows(result: Decoded) -> dict[str, Any]:
    return {
        "columns": {name: array.to_pylist() for name, array in result.columns.items()},
        "mismatched": {name: array.to_pylist() for name, array in result.mismatched.items()},
        "accepted": result.accepted,
        "rejected": result.rejected,
    }


@pytest.mark.parametrize("seed", range(60))
def test_random_records_read_the_same_vectorised_and_record_by_record(seed: int) -> None:
    schemas = Schemas(seed)
    writer = schemas.record()
    parsed = fastavro.parse_schema(json.loads(json.dumps(writer)))
    bodies = []
    for _ in range(schemas.rng.choice([1, 7, 40])):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, schemas.value(writer))
        bodies.append(out.getvalue())
    columns = columns_of(writer, schemas.rng)
    clean = as_rows(decoded(writer, columns, bodies, vectorised=False))
    assert as_rows(decoded(writer, columns, bodies, vectorised=True)) == clean, json.dumps(writer)
    assert not clean["rejected"]
    if seed % 2:  # poison some messages: the same verdicts, and the others read exactly
        touched = {i for i in range(len(bodies)) if schemas.rng.random() < 0.2}
        poisoned = [corrupt(b, schemas.rng) if i in touched else b for i, b in enumerate(bodies)]
        expected = decoded(writer, columns, poisoned, vectorised=False)
        got = decoded(writer, columns, poisoned, vectorised=True)
        assert (got.accepted, got.rejected) == (expected.accepted, expected.rejected), json.dumps(writer)
        # a byte a corruption left outside the spec (a boolean of 2) may read differently; the
        # messages it did not touch read exactly the same
        for name, array in got.columns.items():
            for row, record in enumerate(got.accepted):
                if record not in touched:
                    assert array[row] == expected.columns[name][row], (name, record, json.dumps(writer))


def test_a_clean_block_is_read_in_one_call_and_a_poisoned_one_is_refused() -> None:
    writer = {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "event_id", "type": "string"},
            {"name": "user_id", "type": ["null", "long"]},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["click", "buy"]}},
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            },
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
    parsed = fastavro.parse_schema(json.loads(json.dumps(writer)))
    bodies = []
    for i in range(300):
        out = io.BytesIO()
        record = {
            "event_id": f"e-{i}",
            "user_id": None if i % 3 else i * 1000,
            "kind": "buy" if i % 2 else "click",
            "amount": Decimal(i).scaleb(-2) - 1,
            "tags": ["a"] * (i % 4),
            "event_time": EPOCH + timedelta(days=20000, microseconds=i),
        }
        fastavro.schemaless_writer(out, parsed, record)
        bodies.append(out.getvalue())
    table = decode_records(json.dumps(writer), bodies)
    assert table is not None and table.num_rows == 300
    assert table.column("event_id").to_pylist()[299] == "e-299"
    assert table.column("amount").to_pylist()[0] == Decimal("-1.00")
    for poison in (bodies[7] + b"\x00", bodies[7][:-1], b"\x7f" + bodies[7][1:]):
        assert decode_records(json.dumps(writer), [*bodies[:7], poison, *bodies[8:]]) is None, poison
    with_map = {
        **writer,
        "fields": [*writer["fields"], {"name": "m", "type": {"type": "map", "values": "int"}}],
    }
    assert decode_records(json.dumps(with_map), bodies) is None  # never tried: the reader has no maps
