"""Protobuf topics in the Confluent wire format (message indexes included), framed by the real
ProtobufSerializer against the registry stand-in: types read into the table (wrappers,
Timestamp, enums, optional, repeated, maps), writer versions mixed, one verdict per bad message."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from tests.helpers.classify import block, events_config, spec_of
from tests.helpers.protobuf import proto_events
from tidemark.config import TableConfig
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
