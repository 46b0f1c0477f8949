"""CDC envelopes (Debezium, Maxwell, Canal) read into the flat records of a CDC table: the
row, op and version where the envelope carries them; one verdict per message for every shape
that is not a row change."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from tests.helpers.avro import serializer
from tests.helpers.classify import block, example_config, spec_of
from tests.helpers.protobuf import debezium_proto, proto_events
from tidemark.config import TableConfig
from tidemark.errors import ConfigError
from tidemark.ingest.classify import Classifier

pytestmark = pytest.mark.unit

ROW = {
    "order_id": 7,
    "customer_id": 3,
    "status": "paid",
    "amount": 12.5,
    "updated_at": "2026-11-22T10:15:00Z",
}


def orders(envelope: str, **changes: Any) -> TableConfig:
    return example_config("orders", cdc__envelope=envelope, **changes)


def classify(config: TableConfig, messages: list[Any]) -> tuple[dict[int, Any], dict[int, Any]]:
    values = [m if m is None or isinstance(m, bytes) else json.dumps(m).encode() for m in messages]
    classified = Classifier(spec_of(config)).classify(block(values))
    good = {r["_mq_offset"]: r for r in classified.good.to_pylist()}
    dirty = {r["mq_offset"]: (r["reason"], r["detail"]) for r in classified.dirty.to_pylist()}
    return good, dirty


def debezium(op: str, before: Any = None, after: Any = None, lsn: int | None = 5) -> dict[str, Any]:
    return {
        "before": before,
        "after": after,
        "op": op,
        "source": {"lsn": lsn, "db": "shop"},
        "ts_ms": 1732270500000,
    }


def test_debezium_changes_are_rows_with_op_and_version() -> None:
    update = {**ROW, "status": "shipped"}
    messages = [
        debezium("r", after=ROW, lsn=1),  # the snapshot read: an insert
        debezium("c", after=ROW, lsn=2),
        {"schema": {"type": "struct"}, "payload": debezium("u", before=ROW, after=update, lsn=3)},
        debezium("d", before=update, lsn=4),
        None,  # the tombstone after a delete
        debezium("u", before=ROW, after={**ROW, "version": 99}, lsn=5),  # the row's own version wins
        debezium("c", after=ROW, lsn=None),  # no LSN (e.g. MySQL): ts_ms
    ]
    good, dirty = classify(orders("debezium"), messages)
    assert {o: (r["op"], r["version"], r["status"], r["order_id"]) for o, r in good.items()} == {
        100: ("c", 1, "paid", 7),
        101: ("c", 2, "paid", 7),
        102: ("u", 3, "shipped", 7),
        103: ("d", 4, "shipped", 7),
        105: ("u", 99, "paid", 7),
        106: ("c", 1732270500000, "paid", 7),
    }
    assert good[100]["updated_at"] == datetime(2026, 11, 22, 10, 15, tzinfo=UTC)
    assert dirty == {104: ("tombstone", None)}


def test_every_message_that_is_not_a_row_change_is_one_dirty_record() -> None:
    messages: list[Any] = [
        debezium("x", after=ROW),
        debezium("t"),  # truncate: a table-level event
        {"after": ROW, "source": {}},  # no op
        debezium("c", after=None),  # no row
        debezium("d", before="7"),
        [debezium("c", after=ROW)],
        b'{"op": "c", "after": {"order_id": 1}, "op": "u"}',  # a key given twice
        b'{"op": "c", "after": {"amount": 12345678901234567.891}}',  # more digits than a double
        b"not json",
        {"payload": "x", "schema": {}},
        debezium("c", after={**ROW, "order_id": "seven"}),  # the row itself is checked as ever
    ]
    good, dirty = classify(orders("debezium"), messages)
    assert not good
    reasons = [dirty[100 + i][0] for i in range(len(messages))]
    assert reasons == [
        *["invalid_envelope"] * 6,
        "invalid_json",
        "invalid_json",
        "invalid_json",
        "invalid_envelope",
        "type_mismatch",
    ]
    assert "op 'x' is not a row change" in dirty[100][1] and "after is missing" in dirty[103][1]


def test_maxwell_and_canal_envelopes() -> None:
    maxwell = [
        {
            "database": "shop",
            "table": "orders",
            "type": "insert",
            "ts": 1732270500,
            "xoffset": 2,
            "data": ROW,
        },
        {"database": "shop", "table": "orders", "type": "delete", "ts": 1732270501, "data": ROW},
        {"database": "shop", "table": "orders", "type": "bootstrap-start", "ts": 1732270502, "data": {}},
    ]
    good, dirty = classify(orders("maxwell"), maxwell)
    assert [(r["op"], r["version"]) for r in good.values()] == [
        ("c", 1732270500000002),
        ("d", 1732270501000000),
    ]
    assert dirty[102][0] == "invalid_envelope"
    text = {k: str(v) for k, v in ROW.items()}  # canal-json sends every value as a string
    canal = [
        {"data": [text], "old": None, "type": "INSERT", "es": 1732270500000, "isDdl": False},
        {"data": [text, text], "type": "UPDATE", "es": 1732270500001, "isDdl": False},
        {"data": None, "type": "ALTER", "es": 1732270500002, "isDdl": True, "sql": "alter table"},
    ]
    config = orders(
        "canal",
        source__conversions={n: {"from": "text"} for n in ("order_id", "customer_id", "amount")},
    )
    good, dirty = classify(config, canal)
    assert [(r["op"], r["version"], r["order_id"], str(r["amount"])) for r in good.values()] == [
        ("c", 1732270500000, 7, "12.50")
    ]
    assert "data holds 2 rows" in dirty[101][1] and "isDdl" in dirty[102][1]


DEBEZIUM_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Envelope",
    "namespace": "shop.public.orders",
    "fields": [
        {
            "name": "before",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Value",
                    "fields": [
                        {"name": "order_id", "type": "long"},
                        {"name": "customer_id", "type": ["null", "long"], "default": None},
                        {"name": "status", "type": ["null", "string"], "default": None},
                        {
                            "name": "amount",
                            "type": [
                                "null",
                                {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
                            ],
                            "default": None,
                        },
                        {"name": "updated_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
                    ],
                },
            ],
            "default": None,
        },
        {"name": "after", "type": ["null", "Value"], "default": None},
        {
            "name": "source",
            "type": {
                "type": "record",
                "name": "Source",
                "namespace": "io.debezium.connector.postgresql",
                "fields": [
                    {"name": "db", "type": "string"},
                    {"name": "lsn", "type": ["null", "long"], "default": None},
                ],
            },
        },
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}


def test_a_writer_schema_that_is_not_the_envelope_is_refused_naming_what_it_lacks() -> None:
    with pytest.raises(
        ConfigError, match=r"source\.writer_schema: not a Maxwell envelope: no data or type field"
    ):
        orders("maxwell", source__format="avro", source__writer_schema=DEBEZIUM_AVRO)
    with pytest.raises(
        ConfigError, match=r"source\.writer_schema: not a Debezium envelope: no after or op field"
    ):
        orders(
            "debezium",
            source__format="avro",
            source__writer_schema={"type": "record", "name": "x", "fields": []},
        )
    plain = orders("debezium", source__format="avro", source__writer_schema=DEBEZIUM_AVRO)
    assert plain.cdc is not None and plain.cdc.envelope == "debezium"
    proto = orders("debezium", source__format="protobuf", source__schema_registry={"url": "http://r"})
    assert proto.envelope is not None and proto.envelope.row_field == "after"


def test_debezium_envelopes_in_avro_through_the_registry(schema_registry: str) -> None:
    """Debezium's Avro converter: the envelope is the writer schema, the row its after/before."""

    write = serializer(schema_registry, DEBEZIUM_AVRO, "t")
    row = {
        "order_id": 7,
        "customer_id": 3,
        "status": "paid",
        "amount": Decimal("12.50"),
        "updated_at": datetime(2026, 11, 22, 10, 15, tzinfo=UTC),
    }
    source = {"db": "shop", "lsn": 40}
    messages = [
        write({"before": None, "after": row, "source": {**source, "lsn": 10}, "op": "r", "ts_ms": 1}),
        write(
            {"before": row, "after": {**row, "status": "shipped"}, "source": source, "op": "u", "ts_ms": 2}
        ),
        write({"before": row, "after": None, "source": {"db": "shop", "lsn": None}, "op": "d", "ts_ms": 3}),
        None,
        write({"before": None, "after": None, "source": source, "op": "t", "ts_ms": 4}),  # truncate
    ]
    config = orders("debezium", source__format="avro", source__schema_registry={"url": schema_registry})
    good, dirty = classify(config, messages)
    assert {o: (r["op"], r["version"], r["status"], r["amount"]) for o, r in good.items()} == {
        100: ("c", 10, "paid", Decimal("12.50")),
        101: ("u", 40, "shipped", Decimal("12.50")),
        102: ("d", 3, "paid", Decimal("12.50")),  # no LSN: ts_ms
    }
    assert dirty[103] == ("tombstone", None) and dirty[104][0] == "invalid_envelope"


CHANGES: list[dict[str, Any]] = [
    {"op": "r", "after": {"order_id": 7, "customer_id": 3, "status": "paid"}, "lsn": 10, "ts_ms": 1},
    {
        "op": "u",
        "before": {"order_id": 7},
        "after": {"order_id": 7, "status": "shipped"},
        "lsn": 40,
        "ts_ms": 2,
    },
    {"op": "d", "before": {"order_id": 7, "customer_id": 3}, "lsn": None, "ts_ms": 3},
    {"op": "t", "lsn": 41, "ts_ms": 4},  # truncate: not a row change
    {"op": "u", "after": {"order_id": 8, "status": "new"}, "lsn": None, "ts_ms": None},
]
WHEN = datetime(2026, 11, 22, 10, 15, tzinfo=UTC)


def _full(row: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if row is None else {"customer_id": None, "status": None, **row, "updated_at": WHEN}


def _as_json(change: dict[str, Any]) -> dict[str, Any]:
    def row(r: dict[str, Any] | None) -> dict[str, Any] | None:
        full = _full(r)
        return None if full is None else {**full, "amount": 12.5, "updated_at": "2026-11-22T10:15:00Z"}

    return {
        "before": row(change.get("before")),
        "after": row(change.get("after")),
        "op": change["op"],
        "source": {"db": "shop", "lsn": change["lsn"]},
        "ts_ms": change["ts_ms"],
    }


def _as_avro(change: dict[str, Any]) -> dict[str, Any]:
    def row(r: dict[str, Any] | None) -> dict[str, Any] | None:
        full = _full(r)
        return None if full is None else {**full, "amount": Decimal("12.50")}

    return {
        "before": row(change.get("before")),
        "after": row(change.get("after")),
        "source": {"db": "shop", "lsn": change["lsn"]},
        "op": change["op"],
        "ts_ms": change["ts_ms"],
    }


def test_one_envelope_step_reads_the_same_changes_from_json_avro_and_protobuf(schema_registry: str) -> None:
    """The envelope is unwrapped after decoding, the same for every format: Debezium's JSON,
    Avro and Protobuf converters' messages of the same changes give the same rows, ops,
    versions and verdicts (the Protobuf row's decimal comes as text, as Protobuf has none)."""

    write = serializer(schema_registry, DEBEZIUM_AVRO, "orders-avro")
    proto_changes = [
        {
            **c,
            **{
                side: {**(_full(c[side]) or {}), "amount": "12.50"}
                for side in ("before", "after")
                if c.get(side)
            },
        }
        for c in CHANGES
    ]
    read = {
        "json": classify(orders("debezium"), [_as_json(c) for c in CHANGES]),
        "avro": classify(
            orders("debezium", source__format="avro", source__schema_registry={"url": schema_registry}),
            [write(_as_avro(c)) for c in CHANGES],
        ),
        "protobuf": classify(
            orders(
                "debezium",
                source__format="protobuf",
                source__schema_registry={"url": schema_registry},
                source__conversions={"amount": {"from": "text"}},
            ),
            debezium_proto(schema_registry, proto_changes, topic="orders-proto"),
        ),
    }
    columns = ("op", "version", "order_id", "customer_id", "status", "amount", "updated_at")
    rows = {
        fmt: {o: tuple(r[c] for c in columns) for o, r in good.items()} for fmt, (good, _) in read.items()
    }
    assert rows["json"] == {
        100: ("c", 10, 7, 3, "paid", Decimal("12.50"), WHEN),
        101: ("u", 40, 7, None, "shipped", Decimal("12.50"), WHEN),
        102: ("d", 3, 7, 3, None, Decimal("12.50"), WHEN),  # no LSN: ts_ms; a delete's row is before
    }, "104: no LSN and no ts_ms: no version, a not null column"
    assert rows["avro"] == rows["json"] and rows["protobuf"] == rows["json"]
    verdicts = {fmt: {o: reason for o, (reason, _) in dirty.items()} for fmt, (_, dirty) in read.items()}
    assert (
        verdicts["json"]
        == verdicts["avro"]
        == verdicts["protobuf"]
        == {
            103: "invalid_envelope",
            104: "missing_field",
        }
    )


MAXWELL_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Change",
    "fields": [
        {"name": "database", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "type", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "xoffset", "type": ["null", "long"], "default": None},
        {"name": "data", "type": ["null", DEBEZIUM_AVRO["fields"][0]["type"][1]], "default": None},
    ],
}


def test_maxwell_changes_in_avro_resolve_against_their_data_record() -> None:
    """Any envelope in any format: a Maxwell-shaped Avro writer schema (plain, no registry)."""

    from fastavro import parse_schema, schemaless_writer

    config = orders("maxwell", source__format="avro", source__writer_schema=MAXWELL_AVRO)
    parsed = parse_schema(MAXWELL_AVRO)
    row = {"order_id": 7, "customer_id": 3, "status": "paid", "amount": Decimal("12.50"), "updated_at": WHEN}
    messages = []
    for change in (
        {"type": "insert", "ts": 1732270500, "xoffset": 2, "data": row},
        {"type": "delete", "ts": 1732270501, "xoffset": None, "data": row},
        {"type": "bootstrap-start", "ts": 1732270502, "xoffset": None, "data": None},
    ):
        buffer = io.BytesIO()
        schemaless_writer(buffer, parsed, {"database": "shop", "table": "orders", **change})
        messages.append(buffer.getvalue())
    good, dirty = classify(config, messages)
    assert [(r["op"], r["version"], r["amount"]) for r in good.values()] == [
        ("c", 1732270500000002, Decimal("12.50")),
        ("d", 1732270501000000, Decimal("12.50")),
    ]
    assert dirty[102][0] == "invalid_envelope" and "bootstrap-start" in dirty[102][1]


def test_a_protobuf_message_that_is_not_the_envelope_is_unresolvable(schema_registry: str) -> None:
    config = orders("debezium", source__format="protobuf", source__schema_registry={"url": schema_registry})
    good, dirty = classify(config, proto_events(schema_registry, [{}], topic="events-not-cdc"))
    assert not good
    assert dirty[100][0] == "schema_unresolvable"
    assert "not a Debezium envelope: no after or op field" in dirty[100][1]
