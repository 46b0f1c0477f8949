"""Protobuf topics in the Confluent wire format (message indexes included), framed by the real
ProtobufSerializer against the registry stand-in: types read into the table (wrappers,
Timestamp, enums, optional, repeated, maps), writer versions mixed, one verdict per bad message."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.classify import block, events_config, spec_of
from tests.helpers.protobuf import event_class, proto_events
from tidemark.cli import main
from tidemark.config import TableConfig, load_table_file
from tidemark.errors import ConfigError, SchemaRegistryUnavailableError
from tidemark.ingest.classify import Classifier

pytestmark = pytest.mark.unit
T = datetime(2026, 11, 22, 10, 15, 1, 123456, tzinfo=UTC)


def proto_config(registry_url: str, **changes: Any) -> TableConfig:
    return events_config(
        **{
            "source__format": "protobuf",
            "source__schema_registry": {"url": registry_url},
            "source__conversions": {"amount": {"from": "text"}},
            "schema__tags": "array<string>",
            "schema__attrs": "map<string,bigint>",
            **changes,
        }
    )


def verdicts(config: TableConfig, values: Sequence[bytes | None]) -> tuple[dict[int, Any], dict[int, Any]]:
    classified = Classifier(spec_of(config)).classify(block(values))
    good = {r["_mq_offset"]: r for r in classified.good.to_pylist()}
    dirty = {r["mq_offset"]: (r["reason"], r["detail"]) for r in classified.dirty.to_pylist()}
    return good, dirty


def test_protobuf_values_are_read_into_the_table_across_writer_versions(schema_registry: str) -> None:
    v1 = proto_events(
        schema_registry,
        [
            {
                "event_id": "a",
                "user_id": 7,
                "event_type": 2,
                "event_time": T,
                "tags": ["x", "y"],
                "attrs": {"k": 3},
            }
        ],
        topic="t",
    )
    v2 = proto_events(
        schema_registry,
        [{"event_id": "b", "user_id": 2**40, "app": None, "event_time": T, "session": "s", "amount": "0.10"}],
        version=2,
        topic="t",
    )
    assert v1[0][5] == 0 and v2[0][5:7] == bytes([2, 2])  # message indexes [0] and [1]
    good, dirty = verdicts(proto_config(schema_registry), [v2[0], v1[0], None])
    assert dirty == {102: ("tombstone", None)}
    got = {
        o: (
            r["event_id"],
            r["user_id"],
            r["app"],
            r["event_type"],
            r["amount"],
            r["event_time"],
            r["tags"],
            r["attrs"],
        )
        for o, r in good.items()
    }
    assert got == {
        100: ("b", 2**40, None, "CLICK", Decimal("0.10"), T, [], []),
        101: ("a", 7, "web", "BUY", Decimal("12.50"), T, ["x", "y"], [("k", 3)]),
    }


def test_every_bad_protobuf_message_is_one_verdict(schema_registry: str) -> None:
    good_value = proto_events(schema_registry, [{"event_id": "g", "event_time": T}], topic="t")[0]
    as_text = proto_events(
        schema_registry, [{"event_id": "s", "event_time": "10:15"}], topic="t", event_time_as_text=True
    )[0]
    no_time = proto_events(schema_registry, [{"event_id": "n"}], topic="t")[0]
    messages = [
        good_value,
        b'{"event_id": "json"}',
        b"\x00\x00\x00\x00",  # shorter than the header
        good_value[:5] + b"\x80",  # message indexes cut short
        good_value[:5] + b"\x04\x02\x02",  # a path to a message the file does not have
        b"\x00\x00\x01\x86\xa0" + good_value[5:],  # unknown schema id
        good_value[:-3],  # truncated
        good_value + b"\xf8\x07\x01",  # a field the writer schema does not have
        as_text,
        no_time,  # the Timestamp was never set: null event time
    ]
    good, dirty = verdicts(proto_config(schema_registry), messages)
    assert list(good) == [100] and good[100]["event_id"] == "g"
    assert [dirty[100 + i][0] for i in range(1, len(messages))] == [
        "bad_framing",
        "bad_framing",
        "bad_framing",
        "schema_unresolvable",
        "unknown_schema_id",
        "undecodable",
        "undecodable",
        "schema_unresolvable",
        "null_event_time",
    ]
    assert "field event_time: Protobuf string cannot be read as timestamp" in dirty[108][1]


def test_a_registry_that_does_not_answer_fails_the_block(schema_registry: str) -> None:
    values = proto_events(schema_registry, [{"event_time": T}], topic="t")
    down = {"url": "http://127.0.0.1:9", "properties": {"max.retries": "0"}}
    with pytest.raises(SchemaRegistryUnavailableError, match=r"127\.0\.0\.1:9"):
        Classifier(spec_of(proto_config("x", source__schema_registry=down))).classify(block(values))


def test_protobuf_needs_a_registry() -> None:
    with pytest.raises(ConfigError, match="format protobuf needs schema_registry"):
        events_config(source__format="protobuf")


def test_a_schema_with_imports_is_read_through_its_references(schema_registry: str) -> None:
    """v3 imports ``shop/common.proto``: the serializer registers it as a reference (its own
    subject); the decoder reads the referenced file from the registry and the imported
    message into a struct. A schema whose import no reference names is unresolvable."""

    v3 = proto_events(
        schema_registry,
        [{"event_id": "c", "user_id": 9, "event_time": T, "device": ("ios", 17)}, {"event_time": T}],
        version=3,
        topic="t",
    )
    # the same file registered under another subject without its reference
    from google.protobuf import descriptor_pb2

    file = descriptor_pb2.FileDescriptorProto()
    event_class(3).DESCRIPTOR.file.CopyToProto(file)
    request = urllib.request.Request(
        f"{schema_registry}/subjects/unreferenced/versions",
        data=json.dumps(
            {"schema": base64.b64encode(file.SerializeToString()).decode(), "schemaType": "PROTOBUF"}
        ).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request) as answer:
        orphan_id = json.load(answer)["id"]
    orphan = b"\x00" + orphan_id.to_bytes(4, "big") + v3[0][5:]
    config = proto_config(schema_registry, schema__device="struct<os:string,version:int>")
    good, dirty = verdicts(config, [*v3, orphan])
    assert {o: (r["event_id"], r["user_id"], r["device"]) for o, r in good.items()} == {
        100: ("c", 9, {"os": "ios", "version": 17}),
        101: ("e1", None, None),
    }
    assert dirty[102][0] == "schema_unresolvable"
    assert "imports shop/common.proto, which none of the schema's references names" in dirty[102][1]


def test_a_protobuf_table_from_the_registry_then_validated(
    schema_registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tables init --from-registry`` on a Protobuf subject: the message named when the file
    has several, its fields (imports included) as columns; ``tables validate`` then names the
    field of a later version that the table cannot read."""

    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(conf))
    monkeypatch.setenv("TIDEMARK_STATE_DIR", str(tmp_path / "state"))
    proto_events(schema_registry, [{"event_time": T}], version=3, topic="shop.orders")
    args = ["tables", "init", "--from-registry", "shop.orders-value", "--registry-url", schema_registry]
    assert main(args) == 2
    assert "2 top-level messages; name the topic's with --message (messages: shop.Header, shop.Event)" in (
        capsys.readouterr().err
    )
    assert main([*args, "--message", "shop.Event", "--write"]) == 0
    capsys.readouterr()
    config = load_table_file(conf / "shop_orders.yaml")
    assert (config.source.format, config.event_time.field) == ("protobuf", "event_time")
    assert config.source.schema_registry is not None and config.source.schema_registry.message == "shop.Event"
    assert {c.name: (c.type.ddl(), c.nullable) for c in config.schema_columns} == {
        "event_id": ("string", False),
        "user_id": ("bigint", True),
        "app": ("string", True),
        "event_type": ("string", False),
        "amount": ("string", False),
        "event_time": ("timestamp", True),
        "tags": ("array<string>", False),
        "attrs": ("map<string,bigint>", False),
        "session": ("string", False),
        "device": ("struct<os:string,version:int>", True),
    }
    assert main(["tables", "validate"]) == 0
    capsys.readouterr()
    proto_events(
        schema_registry, [{"event_time": "10:15"}], version=3, topic="shop.orders", event_time_as_text=True
    )
    assert main(["tables", "validate"]) == 1
    err = capsys.readouterr().err
    assert (
        "shop.orders-value v2" in err
        and "field event_time: Protobuf string cannot be read as timestamp" in err
    )
