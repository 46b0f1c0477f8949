"""Avro topics through the real broker and Spark: the Confluent wire format (framed by the
real AvroSerializer, schemas from the registry stand-in and the real SchemaRegistryClient),
mixed writer versions, bad binary input, and a registry that goes away mid-run."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.avro import EVENT_V1, EVENT_V2, avro_events
from tests.helpers.protobuf import proto_events
from tests.helpers.tables import PROCESSING, START, at, fresh_table, landed, read_columns, registered
from tidemark.errors import SchemaRegistryUnavailableError
from tidemark.ingest.dump import replay_dirty, run_dump
from tidemark.ingest.replay import ReplayRequest
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.layout import Layout
from tidemark.state.mode import TableWriter
from tidemark.stream.runner import run_stream
from tidemark_dev.generator import Message, create_topic, produce
from tidemark_dev.schema_registry import SchemaRegistryStandIn

pytestmark = pytest.mark.integration


def rows_by_offset(settings: Settings, table: str) -> dict[tuple[int, int], tuple[Any, ...]]:
    layout = Layout(settings, table)
    out = {}
    for relative in layout.store.all_files(layout.relative(layout.table_dir)):
        if relative.endswith(".parquet"):
            t = read_columns(
                layout.store, relative, ["_mq_partition", "_mq_offset", "event_id", "user_id", "event_time"]
            )
            for r in t.to_pylist():
                out[(r["_mq_partition"], r["_mq_offset"])] = (r["event_id"], r["user_id"], r["event_time"])
    return out


def test_an_avro_topic_lands_exactly_and_survives_its_registry_going_away(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    registry = SchemaRegistryStandIn().start()
    port = int(registry.url.rsplit(":", 1)[1])
    config, settings = fresh_table(
        settings,
        tmp_path,
        dirty__max_dirty_ratio=1.0,
        source__format="avro",
        source__schema_registry={"url": registry.url, "properties": {"max.retries": "1"}},
    )
    topic = config.source.topic
    create_topic(broker, topic, 2)
    t = [START + timedelta(minutes=m) for m in range(0, 120, 7)]
    v1 = avro_events(
        registry.url,
        [{"event_id": f"a{i}", "user_id": i, "event_time": t[i]} for i in range(6)],
        EVENT_V1,
        topic,
    )
    v2 = avro_events(
        registry.url,
        [{"event_id": f"b{i}", "user_id": 2**40 + i, "event_time": t[i]} for i in range(6)],
        EVENT_V2,
        topic,
    )
    bad = [b'{"event_id": "json"}', b"\x00\x00\x00\x03\xe7" + v1[0][5:], v1[1][:-2]]
    values = [v for pair in zip(v1, v2, strict=True) for v in pair] + bad
    delivered = produce(broker, topic, [Message(i % 2, v, None, None) for i, v in enumerate(values)])
    first = run_dump(spark, config, settings, "avro-1", PROCESSING)
    assert (first.read, first.rows, first.dirty) == (15, 12, 3)
    rows, dirty, reasons = landed(settings, config.table)
    by_offset = rows_by_offset(settings, config.table)
    expected = {}
    for p, o, message in delivered:  # content against the offset each value was produced at
        i = values.index(message.value or b"")
        if i < 12:
            k = i // 2
            expected[(p, o)] = (f"a{k}", k, t[k]) if i % 2 == 0 else (f"b{k}", 2**40 + k, t[k])
    assert by_offset == expected and set(rows.values()) == {1}
    assert sorted(reasons.values()) == ["bad_framing", "undecodable", "unknown_schema_id"]
    assert {(p, o) for p, o, m in delivered if values.index(m.value or b"") >= 12} == set(dirty)

    # the registry goes away: the next batch fails before its commit, naming it and the table
    more = avro_events(
        registry.url, [{"event_id": f"c{i}", "event_time": t[i]} for i in range(4)], EVENT_V2, topic
    )
    later = produce(broker, topic, [Message(i % 2, v, None, None) for i, v in enumerate(more)])
    registry.stop()
    with pytest.raises(SchemaRegistryUnavailableError, match=rf"{config.table}: .*127\.0\.0\.1:{port}"):
        run_dump(spark, config, settings, "avro-2", PROCESSING + timedelta(minutes=10))
    commit_log = CommitLog(settings.state_location, config.table)
    assert commit_log.batch_of_run("avro-2") == 1 and commit_log.commit(1) is None

    # back (a fresh registry serving the same ids): the retry reads the same batch, exactly
    back = SchemaRegistryStandIn(port=port).start()
    try:
        assert back.register(f"{topic}-value", json.dumps(EVENT_V1)) == 1
        assert back.register(f"{topic}-value", json.dumps(EVENT_V2)) == 2
        retry = run_dump(spark, config, settings, "avro-2", PROCESSING + timedelta(minutes=10))
    finally:
        back.stop()
    assert (retry.batch_id, retry.read, retry.rows, retry.dirty) == (1, 4, 4, 0)
    rows, dirty, _ = landed(settings, config.table)
    assert set(rows.values()) == {1} and len(rows) == 16 and len(dirty) == 3
    by_offset = rows_by_offset(settings, config.table)
    assert {by_offset[(p, o)][0] for p, o, _ in later} == {f"c{i}" for i in range(4)}


def avro_messages(
    registry_url: str, topic: str, items: list[tuple[int, Any]], prefix: str = "e"
) -> list[Message]:
    """(partition, event time) -> framed v2 events with ids ``<prefix><i>``."""
    values = avro_events(
        registry_url,
        [{"event_id": f"{prefix}{i}", "user_id": i, "event_time": t} for i, (_, t) in enumerate(items)],
        EVENT_V2,
        topic,
    )
    return [Message(p, v, None, None) for (p, _), v in zip(items, values, strict=True)]


def test_an_avro_table_seals_amends_rebuilds_and_replays_as_its_first_read(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, schema_registry: str
) -> None:
    """The whole path on an Avro topic: the hour seals, late rows amend it, a rebuild re-reads
    the broker through the registry into the same rows, and a message whose schema id was
    unknown at its dump lands by replay once the producer's schema is registered."""

    config, settings = fresh_table(
        settings,
        tmp_path,
        late_policy="amend",
        dirty__max_dirty_ratio=1.0,
        source__format="avro",
        source__schema_registry={"url": schema_registry},
    )
    topic, table = config.source.topic, config.table
    create_topic(broker, topic, 2)
    avro_events(schema_registry, [{}], EVENT_V1, topic)  # the producer's v1, registered earlier: id 1
    on_time = [(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)]
    delivered = produce(broker, topic, avro_messages(schema_registry, topic, on_time))
    # a producer that framed with a schema id the registry does not have yet (id 3, its next)
    future = {
        **EVENT_V2,
        "fields": [*EVENT_V2["fields"], {"name": "extra", "type": ["null", "int"], "default": None}],
    }
    early = SchemaRegistryStandIn()  # frames with id 3: two schemas before it, as in the real registry
    early.register("x", json.dumps(EVENT_V1))
    early.register("x", json.dumps(EVENT_V2))
    early.start()
    try:
        unknown = avro_events(early.url, [{"event_id": "u0", "event_time": at(10, 30)}], future, "x")[0]
    finally:
        early.stop()
    assert unknown[1:5] == (3).to_bytes(4, "big")
    delivered += produce(broker, topic, [Message(0, unknown, None, None)])
    first = run_dump(spark, config, settings, "run-1", at(11))
    assert (first.rows, first.dirty) == (12, 1)
    produce(broker, topic, avro_messages(schema_registry, topic, [(0, at(11, 40)), (1, at(11, 30))], "b"))
    run_dump(spark, config, settings, "run-2", at(12))
    assert "2026-11-22T10" in run_seal(spark, config, settings, "run-2").sealed
    produce(broker, topic, avro_messages(schema_registry, topic, [(0, at(10, 15)), (1, at(10, 45))], "late"))
    run_dump(spark, config, settings, "run-3", at(12, 10))
    run_seal(spark, config, settings, "run-3")  # amends hour 10 with the two late rows
    assert "dt=2026-11-22/hr=10" in registered(spark, table)

    def hour_rows() -> list[tuple[Any, ...]]:
        spark.catalog.refreshTable(table)
        frame = spark.sql(f"SELECT * FROM `{table}` WHERE dt = '2026-11-22' AND hr = '10'")
        return sorted(tuple(r) for r in frame.collect())

    before = hour_rows()
    assert len(before) == 14
    (done,) = run_rebuild(spark, config, settings, "rebuild-1", ["2026-11-22T10"]).hours
    assert (done["status"], done["rows"], done["late"]) == ("rebuilt", 14, 2)
    assert hour_rows() == before  # byte for byte the same classification through the registry

    # the producer's schema is registered (id 3): the replay lands the record that was dirty

    request = urllib.request.Request(
        f"{schema_registry}/subjects/{topic}-value/versions",
        data=json.dumps({"schema": json.dumps(future)}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request) as answer:
        assert json.load(answer) == {"id": 3}
    replayed = replay_dirty(
        spark,
        config,
        settings,
        "replay-1",
        ReplayRequest(None, by="ops", reason="schema registered late", at=at(12, 30)),
    )
    assert (replayed.rows, replayed.dirty, replayed.late) == (0, 0, 1), replayed  # hour 10 is sealed
    run_seal(spark, config, settings, "run-4")  # the amend takes it in
    after = hour_rows()
    assert len(after) == 15 and sorted(set(after) - set(before))[0][0] == "u0"
    _, dirty, _ = landed(settings, table)
    assert not dirty


def framed(
    fmt: str, registry_url: str, records: list[dict[str, Any]], version: int, topic: str
) -> list[bytes]:
    """Records framed by the real serializer of ``fmt`` in the producer's schema ``version``."""

    if fmt == "avro":
        return avro_events(registry_url, records, EVENT_V1 if version == 1 else EVENT_V2, topic)
    return proto_events(registry_url, records, version, topic)


FRAMED_TABLES: dict[str, dict[str, Any]] = {
    "avro": {"source__format": "avro"},
    "protobuf": {"source__format": "protobuf", "source__conversions": {"amount": {"from": "text"}}},
}


@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_the_stream_reads_a_framed_topic_as_the_batch_does(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, schema_registry: str, fmt: str
) -> None:
    """The continuous writer decodes with the same decoder: mixed writer versions and a JSON
    message on the framed topic, every offset exactly once, each row with its own content."""

    config, own = fresh_table(
        settings,
        tmp_path,
        dirty__max_dirty_ratio=1.0,
        source__schema_registry={"url": schema_registry},
        **FRAMED_TABLES[fmt],
    )
    table = config.source.topic
    create_topic(broker, table, 1)
    values = [
        *framed(
            fmt,
            schema_registry,
            [{"event_id": f"a{i}", "event_time": START + timedelta(minutes=i)} for i in range(5)],
            1,
            table,
        ),
        *framed(
            fmt,
            schema_registry,
            [{"event_id": f"b{i}", "event_time": START + timedelta(minutes=i)} for i in range(5)],
            2,
            table,
        ),
        b'{"event_id": "json"}',
    ]
    delivered = produce(broker, table, [Message(0, v, None, None) for v in values])
    TableWriter(own.state_dir, config.table).switch(
        "stream", by="test", reason="test", at=PROCESSING.isoformat()
    )
    result = run_stream(
        spark, config, own, "stream-1", clock=lambda: PROCESSING, until_caught_up=True, trigger_interval_s=0.5
    )
    assert "caught up" in result["reason"]
    rows, dirty, reasons = landed(own, config.table)
    assert rows + dirty == Counter((p, o) for p, o, _ in delivered)
    assert list(reasons.values()) == ["bad_framing"]
    by_offset = rows_by_offset(own, config.table)
    for p, o, message in delivered[:10]:
        assert by_offset[(p, o)][0] == ("a" if values.index(message.value or b"") < 5 else "b") + str(
            values.index(message.value or b"") % 5
        )


def test_a_protobuf_table_lands_seals_rebuilds_amends_and_replays_exactly(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, schema_registry: str
) -> None:
    """A Protobuf topic (two writer versions, v2 at message index [1]) through the dump, the
    seal and a rebuild through the registry (each row at its own offset, the same rows again);
    then v3, which imports a file of its own (a schema reference): late rows amend the hour,
    and a message framed with v3's id before the registry had it lands by replay."""

    config, settings = fresh_table(
        settings,
        tmp_path,
        dirty__max_dirty_ratio=1.0,
        source__format="protobuf",
        source__schema_registry={"url": schema_registry},
        source__conversions={"amount": {"from": "text"}},
        late_policy="amend",
        schema__device="struct<os:string,version:int>",
    )
    topic, table = config.source.topic, config.table
    create_topic(broker, topic, 2)
    records = [{"event_id": f"p{i}", "user_id": i, "event_time": at(10, 5 * i)} for i in range(10)]
    values = proto_events(schema_registry, records[:5], 1, topic) + proto_events(
        schema_registry, records[5:], 2, topic
    )
    values.append(b'{"event_id": "json"}')
    # a producer already on v3 (ids 3 for its import, 4 for v3 once registered here too)
    early = SchemaRegistryStandIn().start()
    try:
        proto_events(early.url, [{}], 1, "x")
        proto_events(early.url, [{}], 2, "x")
        device = ("android", 14)
        (unknown,) = proto_events(
            early.url, [{"event_id": "u0", "event_time": at(10, 33), "device": device}], 3, topic
        )
    finally:
        early.stop()
    assert unknown[1:5] == (4).to_bytes(4, "big")
    values.append(unknown)
    delivered = produce(broker, topic, [Message(i % 2, v, None, None) for i, v in enumerate(values)])
    produce(
        broker,
        topic,
        [
            Message(p, v, None, None)
            for p, v in enumerate(
                proto_events(
                    schema_registry,
                    [{"event_id": f"q{p}", "event_time": at(11, 40)} for p in range(2)],
                    2,
                    topic,
                )
            )
        ],
    )
    run_dump(spark, config, settings, "run-1", at(12))
    sealed = run_seal(spark, config, settings, "run-1")
    assert "2026-11-22T10" in sealed.sealed
    # where the seal's time went, per hour and per run (its log line and result)
    assert set(sealed.hour_timings["2026-11-22T10"]) == {"compact", "quality", "register", "journal"}
    assert {"compact", "quality", "register", "journal", "late"} <= set(sealed.timings)
    by_offset = rows_by_offset(settings, table)
    for p, o, message in delivered:
        i = values.index(message.value or b"")
        if i < 10:
            assert by_offset[(p, o)][:2] == (f"p{i}", i)
    rows, _, reasons = landed(settings, table)
    assert set(rows.values()) == {1}
    assert sorted(reasons.values()) == ["bad_framing", "unknown_schema_id"]

    def hour_rows() -> list[tuple[Any, ...]]:
        spark.catalog.refreshTable(table)
        return sorted(tuple(r) for r in spark.sql(f"SELECT * FROM `{table}` WHERE hr = '10'").collect())

    before = hour_rows()
    assert len(before) == 10
    (done,) = run_rebuild(spark, config, settings, "rebuild-1", ["2026-11-22T10"]).hours
    assert done["status"] == "rebuilt"
    assert hour_rows() == before

    # v3 reaches the registry with its import: a late row amends the sealed hour ...
    (late,) = proto_events(
        schema_registry, [{"event_id": "late0", "event_time": at(10, 20), "device": ("ios", 17)}], 3, topic
    )
    produce(broker, topic, [Message(1, late, None, None)])
    run_dump(spark, config, settings, "run-2", at(12, 10))
    run_seal(spark, config, settings, "run-2")
    # ... and the replay lands the message framed with v3's id before the registry had it
    replayed = replay_dirty(
        spark,
        config,
        settings,
        "replay-1",
        ReplayRequest(None, by="ops", reason="v3 registered", at=at(12, 30)),
    )
    assert (replayed.rows, replayed.dirty, replayed.late) == (0, 1, 1), replayed
    run_seal(spark, config, settings, "run-3")
    after = {r.event_id: r.device for r in spark.sql(f"SELECT * FROM `{table}` WHERE hr = '10'").collect()}
    assert len(after) == 12 and after["late0"] == ("ios", 17) and after["u0"] == device
    assert after["p1"] is None
    rows, _, reasons = landed(settings, table)
    assert set(rows.values()) == {1} and list(reasons.values()) == ["bad_framing"]
