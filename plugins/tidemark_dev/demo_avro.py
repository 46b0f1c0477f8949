"""The demo's Avro table: the events of the clickstream again, as most Kafka shops send them,
Avro in the Confluent wire format behind a Schema Registry (the stand-in here, see
``schema_registry.py``), framed by confluent-kafka's real ``AvroSerializer``. One ingest run
lands them beside the JSON table, with a producer's second schema version mixed in and a
few JSON messages sent to the Avro topic by mistake (dirty ``bad_framing``)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from tidemark.catalog import load_table
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark_dev.console import Console
from tidemark_dev.generator import Message, create_topic, events, produce

AVRO_TABLE = "events_avro"
EVENT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "namespace": "demo.clickstream",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "user_id", "type": ["null", "long"], "default": None},
        {"name": "app", "type": ["null", "string"], "default": None},
        {"name": "event_type", "type": "string"},
        {
            "name": "amount",
            "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}],
            "default": None,
        },
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
# the producer's next version: a field the table does not have yet
EVENT_SCHEMA_V2: dict[str, Any] = {
    **EVENT_SCHEMA,
    "fields": [*EVENT_SCHEMA["fields"], {"name": "referrer", "type": ["null", "string"], "default": None}],
}


def write_avro_config(conf_dir: Path, events_yaml: Path, topic: str, registry_url: str) -> None:
    """The Avro table's YAML: the events table's schema, its topic in Avro behind the registry."""
    data = yaml.safe_load(events_yaml.read_text())
    data["table"] = AVRO_TABLE
    data["description"] = "Clickstream events in Avro (Confluent wire format, Schema Registry)."
    data["source"].update(
        topic=topic,
        format="avro",
        consumer_group=f"tidemark-{AVRO_TABLE}",
        schema_registry={"url": registry_url},
    )
    (conf_dir / f"{AVRO_TABLE}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def avro_messages(registry_url: str, topic: str, messages: list[Message]) -> list[Message]:
    """The good JSON events as Avro values, every third with the producer's v2 schema."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    context = SerializationContext(topic, MessageField.VALUE)
    serializers = [AvroSerializer(client, json.dumps(s)) for s in (EVENT_SCHEMA, EVENT_SCHEMA_V2)]
    out = []
    for i, message in enumerate(m for m in messages if m.dirty_kind is None and m.value is not None):
        record = json.loads(message.value or b"{}")
        record["event_time"] = datetime.fromisoformat(record["event_time"])
        record["amount"] = Decimal(record["amount"])
        value = serializers[i % 3 == 2]({**record, "referrer": "search"} if i % 3 == 2 else record, context)
        out.append(Message(message.partition, value, None, message.event_time))
    return out


def run_avro(console: Console, demo: Settings, dag: Any, start: datetime, scale: int) -> bool:
    """One ingest run of the Avro table; True when produced == rows + dirty + late."""

    config = load_table(AVRO_TABLE, demo)
    registry = config.source.schema_registry
    assert registry is not None
    topic = config.source.topic
    create_topic(demo.kafka_bootstrap, topic, 2)
    clicks = list(events(scale // 6, start=start, span=timedelta(hours=2, minutes=30), partitions=2, seed=11))
    messages = avro_messages(registry.url, topic, clicks)
    messages += [Message(i % 2, b'{"event_id": "sent-as-json"}', "bad_framing", None) for i in range(3)]
    console.say("")
    console.say(
        f"{AVRO_TABLE}: the same clickstream as Avro behind a Schema Registry (a stand-in), topic {topic}; "
        "two writer schema versions mixed, 3 JSON messages sent to it by mistake"
    )
    produced = len(produce(demo.kafka_bootstrap, topic, messages))
    processing = start + timedelta(hours=3)
    with console.step(
        f"{AVRO_TABLE}-run", f"one run at {processing:%H:%M}: {produced:,} messages; ingest DAG"
    ):
        dag.test(logical_date=processing, run_after=processing)
    state = CommitLog(demo.state_location, AVRO_TABLE).state()
    sealed = sorted(HourJournal(demo.state_location, AVRO_TABLE).state().hours)
    total = state.rows + state.dirty + state.late
    ok = total == produced
    console.say(
        f"   rows {state.rows:,}, dirty {state.dirty} (bad_framing), sealed and registered: "
        f"{', '.join(sealed) or 'none yet'}"
    )
    console.say(
        f"   reconciliation: produced {produced:,} == rows {state.rows:,} + dirty {state.dirty} + late "
        f"{state.late}: {'OK' if ok else 'MISMATCH'}"
    )
    return ok
