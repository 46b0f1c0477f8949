"""Avro topics: the Confluent wire format through the real AvroSerializer and SchemaRegistryClient
(against the registry stand-in), plain records with a writer schema, Avro's resolution rules
into the table schema, and one verdict per message for every class of bad binary input."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.avro import (
    EVENT_TIME_AS_TEXT,
    EVENT_V1,
    EVENT_V2,
    GOOD_EVENT,
    avro_events,
    hostile_avro,
    plain_avro,
    serializer,
)
from tests.helpers.classify import ROOT, block, events_config, spec_of
from tidemark.cli import main
from tidemark.config import TableConfig, load_table_file
from tidemark.errors import ConfigError, SchemaRegistryUnavailableError
from tidemark.ingest.classify import Classifier
from tidemark.ingest.decoders import avro
from tidemark_dev.net import SilentServer

pytestmark = pytest.mark.unit


def avro_config(registry_url: str, **changes: Any) -> TableConfig:
    return events_config(
        **{"source__format": "avro", "source__schema_registry": {"url": registry_url}, **changes}
    )


def verdicts(config: TableConfig, values: Sequence[bytes | None]) -> tuple[dict[int, Any], dict[int, Any]]:
    classified = Classifier(spec_of(config)).classify(block(values))
    good = {r["_mq_offset"]: r for r in classified.good.to_pylist()}
    dirty = {r["mq_offset"]: r for r in classified.dirty.to_pylist()}
    return good, dirty


def test_every_hostile_binary_message_is_exactly_one_verdict(schema_registry: str) -> None:
    corpus = hostile_avro(schema_registry, "t")
    goods = avro_events(schema_registry, [{"event_id": f"g{i}"} for i in range(len(corpus) + 1)], topic="t")
    values: list[bytes | None] = []
    for i, (_, value, _) in enumerate(corpus):
        values += [goods[i], value]
    values.append(goods[-1])
    good, dirty = verdicts(avro_config(schema_registry), values)
    assert set(good) | set(dirty) == set(range(100, 100 + len(values))) and not set(good) & set(dirty)
    for i in range(len(corpus) + 1):  # content against offsets
        assert good[100 + 2 * i]["event_id"] == f"g{i}"
    for i, (name, value, reason) in enumerate(corpus):
        offset = 101 + 2 * i
        if reason is None:
            assert offset in good, (name, dirty.get(offset))
        else:
            assert offset in dirty, (name, good.get(offset))
            assert dirty[offset]["reason"] == reason, (name, dirty[offset]["detail"])
            assert dirty[offset]["raw_value"] == value
    assert "schema_id=100000" in dirty[101 + 2 * 6]["detail"]
    assert "event_time" in dirty[101 + 2 * 14]["detail"]


def test_mixed_writer_versions_in_one_block_are_read_by_avro_resolution(schema_registry: str) -> None:
    """v1 (int user, millis, enum, decimal bytes) and v2 (long user, micros, a new field,
    fixed decimal) interleaved: each row typed into the table from its own writer schema, in
    offset order, every value where it was produced."""
    t = datetime(2026, 11, 22, 10, 15, 1, 123000, tzinfo=UTC)
    v1 = avro_events(
        schema_registry, [{"event_id": "a", "user_id": 2**31 - 1, "event_time": t}], EVENT_V1, "t"
    )
    v2 = avro_events(
        schema_registry,
        [
            {
                "event_id": "b",
                "user_id": 2**40,
                "session": "s",
                "event_type": "refund",
                "amount": Decimal("1234567890.12"),
                "event_time": t.replace(microsecond=123456),
            }
        ],
        EVENT_V2,
        "t",
    )
    good, dirty = verdicts(avro_config(schema_registry), [v2[0], v1[0], v2[0], None])
    assert [o for o in dirty] == [103]
    assert {
        o: (r["event_id"], r["user_id"], r["event_type"], r["amount"], r["event_time"])
        for o, r in good.items()
    } == {
        100: ("b", 2**40, "refund", Decimal("1234567890.12"), t.replace(microsecond=123456)),
        101: ("a", 2**31 - 1, "click", Decimal("12.50"), t),
        102: ("b", 2**40, "refund", Decimal("1234567890.12"), t.replace(microsecond=123456)),
    }
    assert [r["hr"] for r in good.values()] == ["10", "10", "10"]


def test_plain_avro_with_a_writer_schema_file(tmp_path: Path) -> None:
    """``source.writer_schema`` as a .avsc path, relative to the YAML: the loaded config
    carries the schema itself (so tasks, replays and rebuilds need no file)."""

    (tmp_path / "event.avsc").write_text(json.dumps(EVENT_V1))
    data = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    data["source"].update(format="avro", writer_schema="event.avsc")
    (tmp_path / "events.yaml").write_text(yaml.safe_dump(data))
    loaded = load_table_file(tmp_path / "events.yaml")
    assert json.loads(loaded.source.writer_schema) == EVENT_V1
    good, dirty = verdicts(
        loaded, [*plain_avro([{"event_id": "p1"}, {"event_id": "p2", "app": None}]), b"\x02"]
    )
    assert [(r["event_id"], r["app"]) for r in good.values()] == [("p1", "web"), ("p2", None)]
    assert dirty[102]["reason"] == "undecodable" and not dirty[102]["detail"].startswith("schema_id")
    data["source"]["writer_schema"] = "missing.avsc"
    (tmp_path / "events.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"source.writer_schema: .*missing.avsc"):
        load_table_file(tmp_path / "events.yaml")


def test_declared_conversions_apply_to_avro_fields(schema_registry: str) -> None:
    """An epoch-millis long without a logical type, converted by ``source.conversions``."""
    schema = {**EVENT_V1, "fields": [*EVENT_V1["fields"][:-1], {"name": "event_time", "type": "long"}]}
    millis = int(datetime(2026, 11, 22, 11, 0, tzinfo=UTC).timestamp() * 1000)
    values = avro_events(schema_registry, [{"event_id": "c", "event_time": millis}], schema, "t")
    good, _ = verdicts(
        avro_config(schema_registry, source__conversions={"event_time": {"from": "epoch_millis"}}), values
    )
    assert [(r["event_id"], r["event_time"], r["hr"]) for r in good.values()] == [
        ("c", datetime(2026, 11, 22, 11, 0, tzinfo=UTC), "11")
    ]


def test_a_registry_that_does_not_answer_fails_the_block_not_a_record(schema_registry: str) -> None:
    values = avro_events(schema_registry, [{}], topic="t")
    config = avro_config(
        "http://127.0.0.1:9",
        source__schema_registry={"url": "http://127.0.0.1:9", "properties": {"max.retries": "0"}},
    )
    with pytest.raises(SchemaRegistryUnavailableError, match=r"127\.0\.0\.1:9.*retry of this run re-reads"):
        Classifier(spec_of(config)).classify(block(values))


def test_a_registry_that_accepts_and_never_answers_fails_the_block_in_bounded_time(
    schema_registry: str,
) -> None:
    """Under the default client settings (the client's own have no timeout: it hung forever)."""

    values = avro_events(schema_registry, [{}], topic="t")
    with SilentServer() as hung:
        config = avro_config(hung.url)
        started = time.monotonic()
        with pytest.raises(SchemaRegistryUnavailableError, match=r"schema id 1: .*Timeout"):
            Classifier(spec_of(config)).classify(block(values))
    assert time.monotonic() - started < 120  # a bound, not a speed: without a timeout it never returns


def test_a_404_that_is_not_the_registrys_own_fails_the_block_not_a_record(schema_registry: str) -> None:
    """A wrong URL (or a proxy's page) answers 404 without the registry's 40403: not the
    record's fault, so no record may go dirty as ``unknown_schema_id``."""
    values = avro_events(schema_registry, [{}], topic="t")
    config = avro_config(f"{schema_registry}/not/the/registry")
    with pytest.raises(SchemaRegistryUnavailableError, match=r"HTTP 404"):
        Classifier(spec_of(config)).classify(block(values))
    unknown = avro_config(schema_registry)
    framed_99 = b"\x00\x00\x00\x00\x63" + values[0][5:]  # an id the registry does not have
    _, dirty = verdicts(unknown, [framed_99])
    assert [r["reason"] for r in dirty.values()] == ["unknown_schema_id"]


def test_avro_configs_are_refused_when_they_cannot_hold() -> None:
    with pytest.raises(ConfigError, match="format avro needs exactly one of schema_registry"):
        events_config(source__format="avro")
    with pytest.raises(
        ConfigError, match="schema_registry and writer_schema are for formats avro and protobuf"
    ):
        events_config(source__schema_registry={"url": "http://r"})
    unreadable = {**EVENT_V1, "fields": [{"name": "event_id", "type": "long"}, *EVENT_V1["fields"][1:]]}
    with pytest.raises(ConfigError, match=r"field event_id: Avro long cannot be read as string"):
        events_config(source__format="avro", source__writer_schema=unreadable)
    no_time = {**EVENT_V1, "fields": EVENT_V1["fields"][:-1]}
    with pytest.raises(
        ConfigError, match=r"field event_time: not in the writer schema, and the column is not null"
    ):
        events_config(source__format="avro", source__writer_schema=no_time)
    # maps need no JSON workaround in Avro
    config = events_config(
        source__format="avro", source__writer_schema=EVENT_V1, schema__attrs="map<string,bigint>"
    )
    assert config.columns["attrs"].type.name == "map"


def test_a_table_from_the_registry_then_validated_against_its_versions(
    schema_registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tables init --from-registry`` writes a YAML from the subject's latest schema (the
    first thing a new user does); ``tables validate`` and ``schema`` check the registry's
    versions against it and name the field of one that cannot be read."""

    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(conf))
    monkeypatch.setenv("TIDEMARK_STATE_DIR", str(tmp_path / "state"))
    serializer(schema_registry, EVENT_V1, "shop.clicks")({**GOOD_EVENT})  # the producer registers v1
    assert main(["tables", "init", "--from-registry", "nope-value", "--registry-url", schema_registry]) == 2
    assert "no subject 'nope-value'" in capsys.readouterr().err
    args = ["tables", "init", "--from-registry", "shop.clicks-value", "--registry-url", schema_registry]
    assert main([*args, "--write"]) == 0
    assert "wrote" in capsys.readouterr().out
    config = load_table_file(conf / "shop_clicks.yaml")
    assert (config.source.topic, config.source.format, config.event_time.field) == (
        "shop.clicks",
        "avro",
        "event_time",
    )
    assert {c.name: (c.type.ddl(), c.nullable) for c in config.schema_columns} == {
        "event_id": ("string", False),
        "user_id": ("int", True),
        "app": ("string", True),
        "event_type": ("string", False),
        "amount": ("decimal(10,2)", True),
        "event_time": ("timestamp", False),
    }
    assert main([*args, "--write"]) == 2  # never overwritten
    capsys.readouterr()
    assert main(["tables", "validate"]) == 0
    assert "shop_clicks" in capsys.readouterr().out

    # the producer moves to a schema the table cannot read: found at validation, by field
    serializer(schema_registry, EVENT_TIME_AS_TEXT, "shop.clicks")({**GOOD_EVENT, "event_time": "10:15"})
    assert main(["tables", "validate"]) == 1
    err = capsys.readouterr().err
    assert (
        "shop.clicks-value v2" in err and "field event_time: Avro string cannot be read as timestamp" in err
    )
    assert main(["schema", "--table", "shop_clicks"]) == 2
    out = capsys.readouterr().out
    assert "shop.clicks-value v1 (schema id 1): reads into the table" in out
    assert "shop.clicks-value v2 (schema id 2): REFUSED: field event_time" in out


def test_a_writer_schema_with_references_is_read_with_them_inlined(schema_registry: str) -> None:
    """The producer's schema takes its enum from another subject (a registry reference): both
    reads get one self-contained schema, the referenced type defined at its first use."""
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": schema_registry})
    kind = {"type": "enum", "name": "Kind", "namespace": "shop.events", "symbols": ["click", "view", "buy"]}
    client.register_schema("shop.events.Kind", Schema(json.dumps(kind), "AVRO"))
    fields = [
        f if f["name"] != "event_type" else {"name": "event_type", "type": "shop.events.Kind"}
        for f in EVENT_V1["fields"]
    ]
    referencing = Schema(
        json.dumps({**EVENT_V1, "fields": fields}),
        "AVRO",
        [SchemaReference("shop.events.Kind", "shop.events.Kind", 1)],
    )
    serialize = AvroSerializer(client, referencing)
    context = SerializationContext("t", MessageField.VALUE)
    values = [serialize({**GOOD_EVENT, "event_id": f"r{i}", "event_type": "buy"}, context) for i in range(3)]
    for vectorised in (True, False):
        avro.VECTORISED = vectorised
        try:
            good, dirty = verdicts(avro_config(schema_registry), values)
        finally:
            avro.VECTORISED = True
        assert not dirty, dirty
        assert [(good[100 + i]["event_id"], good[100 + i]["event_type"]) for i in range(3)] == [
            (f"r{i}", "buy") for i in range(3)
        ]
