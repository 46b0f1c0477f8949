"""The ``source:`` section of a table YAML: the topic, how its messages are encoded, where
their writer schemas live, and the client settings to reach them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from tidemark.avro_schema import Unresolvable, read_plan
from tidemark.conversions import Conversion, conversion_problems
from tidemark.durations import parse_size
from tidemark.envelopes import Envelope
from tidemark.errors import ConfigError
from tidemark.schema import Column

Size = Annotated[int, BeforeValidator(parse_size)]
SOURCE_FORMATS = ("json", "avro", "protobuf")

# librdkafka settings that change what a planned range reads, or where a reader starts: the
# reader's own values are the protocol (a batch reads exactly its planned offsets, committed
# records only, and fails by name when they are gone). A user's consumer config copied into
# ``source.kafka_properties`` must not override them, so the YAML refuses them, saying why.
READER_OWNED: dict[str, str] = {
    "auto.offset.reset": "a batch reads exactly its planned offsets; when they are gone the reader must "
    "fail by name (OffsetsLostToRetentionError), never jump to the log start or end",
    "isolation.level": "batches read committed records only and plans end at the last stable offset; "
    "read_uncommitted would land aborted records",
    "enable.partition.eof": "the reader needs the end-of-partition event to finish ranges that end in "
    "transaction markers or compacted offsets",
    "enable.auto.commit": "the commit log is the source of truth; the consumer group's offsets are "
    "committed by tidemark after each batch, for lag monitoring only",
    "auto.commit.enable": "the commit log is the source of truth (an alias of enable.auto.commit)",
    "enable.auto.offset.store": "the commit log is the source of truth, not the consumer's offset store",
    "group.id": "the consumer group is source.consumer_group (lag monitoring); reads use assign(), "
    "never a group",
    "group.instance.id": "reads use assign(), never a consumer group's membership",
    "group.protocol": "reads use assign(), never a consumer group's membership",
    "partition.assignment.strategy": "reads use assign(), never a consumer group's membership",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SchemaRegistryConfig(_Strict):
    """A Confluent-API Schema Registry: ``url`` and the client's other properties
    (``basic.auth.user.info``, ``ssl.ca.location``, ``ssl.certificate.location``,
    ``ssl.key.location``, ``timeout``...), values like ``${ENV_VAR}`` read from the environment
    where they are used, so secrets never sit in the YAML."""

    url: str = Field(min_length=1)
    properties: dict[str, str] = Field(default_factory=dict)
    # the subject whose latest version `tidemark tables validate` checks (default <topic>-value)
    subject: str = ""
    # protobuf: the full name of the topic's message type that `tables validate` checks
    # (default: any top-level message of the file that reads into the table); records name
    # their own type by their message indexes
    message: str = ""

    def client_properties(self) -> dict[str, str]:
        """The client's configuration, ``${VAR}`` references unresolved (safe to carry and show)."""
        return {"url": self.url, **self.properties}


class SourceConfig(_Strict):
    """Where the table's records come from: a Kafka-protocol topic, and its message format."""

    topic: str = Field(min_length=1)
    format: Literal["json", "avro", "protobuf"] = "json"
    consumer_group: str = ""
    starting_offsets: Literal["earliest", "latest"] | dict[int, int] = "earliest"
    max_records_per_partition: int = Field(default=1_000_000, gt=0)
    max_message_bytes: Size = 1024 * 1024
    on_data_loss: Literal["fail", "record_and_continue"] = "fail"
    # librdkafka properties (security.protocol, sasl.*, ssl.*); values like "${ENV_VAR}" are
    # read from the environment at run time so secrets never sit in the YAML.
    kafka_properties: dict[str, str] = Field(default_factory=dict)
    # columns carried in another shape (epoch numbers, formatted times, numbers as strings)
    conversions: dict[str, Conversion] = Field(default_factory=dict)
    # avro: writer schemas from a registry (Confluent wire format) ...
    schema_registry: SchemaRegistryConfig | None = None
    # ... or one writer schema for plain binary records: the schema (a mapping) or a .avsc
    # file's path, relative to the YAML's directory (read when the YAML is loaded)
    writer_schema: str = ""
    # the topic is gone for good (a family's discovery sets it; a table may too): runs read no
    # broker, each commits an empty batch, and the hours up to the last record's seal
    retired: bool = False
    # retired, and every hour up to its last record published (a family's discovery sets it):
    # the table has no DAGs and is in no group's barrier; its data and state stay
    done: bool = False

    @field_validator("kafka_properties")
    @classmethod
    def _reader_owned(cls, value: dict[str, str]) -> dict[str, str]:
        refused = [
            f"{key} is the reader's own setting: {READER_OWNED[key]}" for key in value if key in READER_OWNED
        ]
        if refused:
            raise ValueError("; ".join(refused) + " (remove it from source.kafka_properties)")
        return value

    @field_validator("writer_schema", mode="before")
    @classmethod
    def _schema_text(cls, value: object) -> object:
        if isinstance(value, dict):
            return json.dumps(value, sort_keys=True)
        return value

    @property
    def subject(self) -> str:
        """The registry subject of the topic's values (TopicNameStrategy unless set)."""
        return (self.schema_registry.subject if self.schema_registry else "") or f"{self.topic}-value"


def read_schema_files(data: Any, yaml_path: str, directory: Path) -> Any:
    """A YAML's ``source.writer_schema`` given as a file path replaced by the file's schema,
    so the loaded config (and every task it travels to) carries the schema itself."""
    source = data.get("source") if isinstance(data, dict) else None
    if not isinstance(source, dict) or not isinstance(source.get("writer_schema"), str):
        return data
    text = source["writer_schema"].strip()
    if not text or text.startswith("{"):
        return data
    path = directory / text
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            yaml_path, [f"source.writer_schema: cannot read the schema file {path}: {exc}"]
        ) from None
    return {**data, "source": {**source, "writer_schema": schema}}


def source_problems(
    source: SourceConfig, columns: dict[str, Column], envelope: Envelope | None = None
) -> list[str]:
    """Cross-checks of the source against the schema: conversions, and for Avro where the
    writer schemas come from and, for a schema file, that it resolves into the columns."""
    problems = conversion_problems(columns, source.conversions)
    if source.format == "json":
        for column in columns.values():
            if (problem := column.type.json_problem()) is not None:
                problems.append(f"schema: column {column.name!r}: {problem}")
        if source.schema_registry is not None or source.writer_schema:
            problems.append(
                "source: schema_registry and writer_schema are for formats avro and protobuf, not json"
            )
        return problems
    if source.format == "protobuf":
        if source.schema_registry is None or source.writer_schema:
            problems.append(
                "source: format protobuf needs schema_registry (the Confluent wire format), no writer_schema"
            )
        return problems
    if (source.schema_registry is None) == (not source.writer_schema):
        problems.append(
            "source: format avro needs exactly one of schema_registry (the Confluent wire format) "
            "or writer_schema (plain binary records)"
        )
    elif source.writer_schema:
        try:
            read_plan(source.writer_schema, list(columns.values()), source.conversions, envelope=envelope)
        except Unresolvable as exc:
            problems.append(f"source.writer_schema: {exc}")
    return problems
