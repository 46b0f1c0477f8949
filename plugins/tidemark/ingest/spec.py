"""What a read task needs to classify a batch (``ClassifySpec``: plain values that travel to
executors as JSON), the raw records it consumes and the classified block it produces."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.config.columns import LINEAGE_FIELDS, RAW_FIELDS, arrow_fields
from tidemark.envelopes import Envelope, envelope_of
from tidemark.schema import Column, parse_column
from tidemark.time.instants import as_utc

if TYPE_CHECKING:
    import pyarrow as pa

    from tidemark.config import TableConfig
    from tidemark.state.batches import Plan


@dataclass(frozen=True)
class ClassifySpec:
    """Everything a task needs to classify a batch's records: plain values, so it travels to
    executors as a JSON option (no TableConfig, no YAML on the executors)."""

    topic: str
    batch_id: int
    run_id: str
    columns: tuple[tuple[str, str], ...]  # (name, "ddl [not null]")
    event_time_field: str
    time_zone: str
    max_message_bytes: int
    future_limit: str  # ISO instant: event times after it are dirty
    sealed_through: str | None  # ISO instant: good rows before it are late
    oldest_limit: str | None  # ISO instant: event times before it are too old
    too_old: str  # dirty | late
    partition_columns: tuple[str, ...]
    source_format: str = "json"  # the decoder of the messages (``ingest/decoders``)
    conversions: tuple[tuple[str, str], ...] = ()  # (column, Conversion.describe())
    table: str = ""
    # framed formats: the registry client's properties (``${VAR}`` unresolved: resolved in the
    # task, so no secret travels in the spec), or the one writer schema of an unframed topic
    schema_registry: tuple[tuple[str, str], ...] = ()
    writer_schema: str = ""
    envelope: str = "flat"  # a CDC table's envelope (``envelopes.py``)
    cdc_fields: tuple[str, str] = ("op", "version")  # (op field, version field) of a CDC table
    table_format: str = "parquet"  # output.format: the values it cannot hold are dirty (exact.py)

    @classmethod
    def of(
        cls,
        config: TableConfig,
        *,
        topic: str,
        batch_id: int,
        run_id: str,
        clock: datetime,
        sealed_through: datetime | None,
    ) -> ClassifySpec:
        registry = config.source.schema_registry
        return cls(
            topic=topic,
            batch_id=batch_id,
            run_id=run_id,
            columns=tuple(
                (c.name, c.type.ddl() + ("" if c.nullable else " not null")) for c in config.schema_columns
            ),
            event_time_field=config.event_time.field,
            time_zone=config.event_time.time_zone,
            max_message_bytes=config.source.max_message_bytes,
            future_limit=as_utc(clock + config.watermark.max_future_skew).isoformat(),
            sealed_through=as_utc(sealed_through).isoformat() if sealed_through else None,
            oldest_limit=as_utc(clock - config.watermark.max_event_age).isoformat()
            if config.watermark.max_event_age
            else None,
            too_old=config.watermark.too_old,
            partition_columns=tuple(config.partitioning.columns),
            source_format=config.source.format,
            conversions=tuple(sorted((k, v.describe()) for k, v in config.source.conversions.items())),
            table=config.table,
            schema_registry=tuple(sorted(registry.client_properties().items())) if registry else (),
            writer_schema=config.source.writer_schema,
            envelope=config.cdc.envelope if config.cdc else "flat",
            cdc_fields=(config.cdc.op_field, config.cdc.version_field) if config.cdc else ("op", "version"),
            table_format=config.output.format,
        )

    @classmethod
    def of_batch(
        cls,
        config: TableConfig,
        *,
        topic: str,
        batch_id: int,
        run_id: str,
        clock: str,
        sealed_through: str | None,
    ) -> ClassifySpec:
        """The spec of a planned batch, from its plan's recorded instants (ISO text): a retry,
        a replay and a rebuild classify exactly as the batch's first attempt did."""
        return cls.of(
            config,
            topic=topic,
            batch_id=batch_id,
            run_id=run_id,
            clock=datetime.fromisoformat(clock),
            sealed_through=datetime.fromisoformat(sealed_through) if sealed_through else None,
        )

    @classmethod
    def of_plan(cls, config: TableConfig, plan: Plan) -> ClassifySpec:
        return cls.of_batch(
            config,
            topic=plan.topic,
            batch_id=plan.batch_id,
            run_id=plan.run_id,
            clock=plan.clock,
            sealed_through=plan.sealed_through,
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ClassifySpec:
        data = json.loads(text)
        data["columns"] = tuple(tuple(c) for c in data["columns"])
        data["partition_columns"] = tuple(data["partition_columns"])
        data["conversions"] = tuple(tuple(c) for c in data.get("conversions", ()))
        data["schema_registry"] = tuple(tuple(c) for c in data.get("schema_registry", ()))
        data["cdc_fields"] = tuple(data.get("cdc_fields", ("op", "version")))
        return cls(**data)

    @property
    def cdc_envelope(self) -> Envelope | None:
        """The CDC envelope of the messages (None: each message is the row)."""
        return envelope_of(self.envelope, *self.cdc_fields)

    @property
    def schema_columns(self) -> list[Column]:
        return [parse_column(name, spec) for name, spec in self.columns]

    @property
    def keep_raw(self) -> bool:
        """Good rows keep their raw bytes only where the cardinality bound may still make them
        dirty after this classification (tables with data-derived partition columns)."""
        return bool(self.partition_columns)


@dataclass
class RawRecords:
    """One block of consumed messages of one MQ partition, as the consumer hands them out."""

    mq_partition: int
    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True)
class Classified:
    """A classified block: ``good`` has the typed columns, hour labels, ``_late`` and MQ
    lineage (plus raw bytes when the spec keeps them); ``dirty`` has DIRTY_COLUMNS."""

    good: pa.Table
    dirty: pa.Table


def good_schema(spec: ClassifySpec, *, raw: bool | None = None) -> pa.Schema:
    """Schema of classified good rows; ``raw`` (default: the spec's ``keep_raw``) adds the
    raw key and value."""
    import pyarrow as pa

    fields = [pa.field(c.name, c.type.to_arrow()) for c in spec.schema_columns]
    fields += arrow_fields(LINEAGE_FIELDS)
    if spec.keep_raw if raw is None else raw:
        fields += arrow_fields(RAW_FIELDS)
    return pa.schema(fields)
