"""The table's model: every section of its YAML, checked against each other (the event-time
field is a timestamp column, partition and key columns exist, the watermark's durations fit,
a CDC table has its key and ``late_policy: amend``), and what jobs derive from it (the late
table's name, the consumer group, the columns expectations may name)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Literal

from pydantic import ConfigDict, Field, InstanceOf, field_validator, model_validator

from tidemark.config.cdc import CdcConfig
from tidemark.config.maintenance import CompactionConfig, RetentionConfig, retention_problems
from tidemark.config.sections import (
    DirtyConfig,
    EventTimeConfig,
    OutputConfig,
    PartitioningConfig,
    QualityConfig,
    Section,
    StreamConfig,
    WatermarkConfig,
    expectation_columns,
)
from tidemark.config.source import SourceConfig, source_problems
from tidemark.durations import Duration
from tidemark.envelopes import Envelope, envelope_of
from tidemark.schema import TIMESTAMP_TYPES, Column, parse_column
from tidemark.tableformat import COMPRESSIONS

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


class TableConfig(Section):
    """A validated table description (see conf/tables/*.yaml for annotated examples)."""

    table: str
    description: str = ""
    source: SourceConfig
    columns: dict[str, InstanceOf[Column]] = Field(alias="schema")
    event_time: EventTimeConfig
    partitioning: PartitioningConfig = PartitioningConfig()
    watermark: WatermarkConfig = WatermarkConfig()
    primary_key: list[str] = Field(default_factory=list)
    late_policy: Literal["side_table", "amend"] = "side_table"
    dirty: DirtyConfig = DirtyConfig()
    output: OutputConfig = OutputConfig()
    cdc: CdcConfig | None = None
    quality: QualityConfig = QualityConfig()
    stream: StreamConfig = StreamConfig()
    retention: RetentionConfig = RetentionConfig()
    compaction: CompactionConfig = CompactionConfig()
    schedule: str = "*/10 * * * *"
    retries: int = Field(default=3, ge=0)
    retry_delay: Duration = timedelta(minutes=1)
    tags: list[str] = Field(default_factory=list)
    owner: str = "data-eng"
    # Tables of one group run as one Spark application per run (tidemark.group)
    group: str | None = None
    # The topic family the table was made from (tidemark.family; set by its loader)
    family: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("table")
    @classmethod
    def _table_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"expected a lower-case table name (letters, digits, underscores; max 63), got {value!r}"
            )
        return value

    @field_validator("group", "family")
    @classmethod
    def _group_name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME.match(value):
            raise ValueError(
                f"expected a lower-case name (letters, digits, underscores; max 63), got {value!r}"
            )
        return value

    @field_validator("columns", mode="before")
    @classmethod
    def _parse_schema(cls, value: object) -> dict[str, Column]:
        if not isinstance(value, dict) or not value:
            raise ValueError("expected a mapping of column name -> Spark SQL type, e.g. {event_id: string}")
        columns: dict[str, Column] = {}
        problems = []
        for name, spec in value.items():
            try:
                columns[str(name)] = parse_column(str(name), spec)
            except ValueError as exc:
                problems.append(f"column {name!r}: {exc}")
        if problems:
            raise ValueError("; ".join(problems))
        return columns

    @model_validator(mode="after")
    def _cross_checks(self) -> TableConfig:
        problems: list[str] = []
        ts = self.columns.get(self.event_time.field)
        if ts is None:
            problems.append(
                f"event_time.field: {self.event_time.field!r} is not a column of the schema "
                f"(columns: {', '.join(self.columns)})"
            )
        elif ts.type.name not in TIMESTAMP_TYPES:
            problems.append(
                f"event_time.field: column {ts.name!r} has type {ts.type.ddl()}; expected timestamp"
            )
        problems += source_problems(self.source, self.columns, self.envelope)
        problems += retention_problems(self.retention, self.late_policy)
        for key in self.primary_key:
            if key not in self.columns:
                problems.append(f"primary_key: {key!r} is not a column of the schema")
        problems += [
            f"column {c.name!r}: {c.type.ddl()}: the Hive metastore (2.3) has no timestamp_ntz type, so "
            "the table could never be registered; declare timestamp (a wall time read as UTC)"
            for c in self.columns.values()
            if c.type.holds("timestamp_ntz")
        ]
        for col in self.partitioning.columns:
            spec = self.columns.get(col)
            if spec is None:
                problems.append(f"partitioning.columns: {col!r} is not a column of the schema")
            elif spec.type.name != "string":
                problems.append(
                    f"partitioning.columns: {col!r} must be a string column, not {spec.type.ddl()}"
                )
        if self.output.compression not in COMPRESSIONS[self.output.format]:
            problems.append(
                f"output.compression: {self.output.compression} is not a {self.output.format} compression "
                f"({', '.join(COMPRESSIONS[self.output.format])})"
            )
        if self.output.table_format == "iceberg" and self.output.format != "parquet":
            problems.append(
                f"output.format: {self.output.format}: an Iceberg table (output.table_format: iceberg) is "
                "written as Parquet here (its file statistics come from Parquet footers); set "
                "output.format: parquet"
            )
        wm = self.watermark
        if wm.idle_timeout <= timedelta(0):
            problems.append("watermark.idle_timeout: must be longer than 0")
        if wm.max_event_age is not None and wm.max_event_age <= wm.max_out_of_orderness + wm.commit_delay:
            problems.append(
                f"watermark.max_event_age: {wm.max_event_age} must be longer than max_out_of_orderness "
                f"({wm.max_out_of_orderness}) + commit_delay ({wm.commit_delay}): records the watermark "
                "still waits for would be refused as too old"
            )
        for i, item in enumerate(self.quality.expectations):
            for column in expectation_columns(dict(item.get("kwargs") or {})):
                if column not in self.expectation_columns:
                    problems.append(f"quality.expectations[{i}]: {column!r} is not a column of the schema")
        if self.cdc is not None:
            for key in (self.cdc.op_field, self.cdc.version_field):
                if key not in self.columns:
                    problems.append(f"cdc: {key!r} is not a column of the schema")
            if not self.primary_key:
                problems.append("primary_key: a cdc table needs the key its changes are merged by")
            if self.cdc.merge_engine != "delta-rs" and self.cdc.snapshot_format != "delta":
                problems.append("cdc.merge_engine applies to cdc.snapshot_format: delta only")
            if self.late_policy != "amend":
                problems.append(
                    "late_policy: a cdc table needs 'amend': a late change must reach the sealed hour "
                    "the merge reads (and re-trigger its snapshot), not a side table"
                )
        if problems:
            # One line per problem; each line already names its key (see _describe).
            raise ValueError("\n".join(problems))
        return self

    @property
    def envelope(self) -> Envelope | None:
        """The CDC envelope of the messages (None: each message is the row)."""
        cdc = self.cdc
        return None if cdc is None else envelope_of(cdc.envelope, cdc.op_field, cdc.version_field)

    # Derived names, one place so jobs, DAGs and the CLI agree.
    @property
    def expectation_columns(self) -> set[str]:
        """The columns a quality expectation may name: the schema's, MQ lineage and the hour."""
        return {*self.columns, "dt", "hr", "_mq_partition", "_mq_offset", "_mq_timestamp", "_batch_id"}

    @property
    def schema_columns(self) -> list[Column]:
        return list(self.columns.values())

    @property
    def dirty_table(self) -> str:
        return f"{self.table}__dirty"

    @property
    def snapshot_table(self) -> str:
        return f"{self.table}_snapshot"

    @property
    def fresh_table(self) -> str:
        """A Hive table's fresh read (``fresh.hive_table``)."""
        return f"{self.table}_fresh"

    @property
    def late_table(self) -> str:
        return f"{self.table}__late"

    @property
    def consumer_group(self) -> str:
        return self.source.consumer_group or f"tidemark-{self.table}"
