"""Table configuration: one YAML file per table, validated into a typed model.

A data engineer describes a table once (topic, schema, event-time field, partitioning, watermark
tolerances, primary key, quality rules, retention); every DAG, job and CLI command reads it through
:func:`load_table`. Validation errors name the file, the key and what was expected, all at once.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    InstanceOf,
    ValidationError,
    field_validator,
    model_validator,
)

from tidemark.cdc_config import CdcConfig
from tidemark.durations import Duration, format_duration
from tidemark.envelopes import Envelope, envelope_of
from tidemark.errors import ConfigError
from tidemark.maintenance_config import CompactionConfig, RetentionConfig, retention_problems
from tidemark.masking import masked
from tidemark.schema import TIMESTAMP_TYPES, Column, parse_column
from tidemark.settings import Settings
from tidemark.source_config import Size, SourceConfig, read_schema_files, source_problems
from tidemark.tableformat import COMPRESSIONS

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EventTimeConfig(_Strict):
    field: str
    time_zone: str = "UTC"

    @field_validator("time_zone")
    @classmethod
    def _zone_exists(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}; expected an IANA name such as 'UTC' or 'Europe/Berlin'"
            ) from None
        return value


class PartitioningConfig(_Strict):
    granularity: Literal["hour"] = "hour"
    # Extra partition columns whose values come from the data (e.g. app); validated per row.
    columns: list[str] = Field(default_factory=list)
    max_values_per_column: int = Field(default=64, gt=0)


class WatermarkConfig(_Strict):
    max_out_of_orderness: Duration = timedelta(minutes=5)
    idle_timeout: Duration = timedelta(minutes=30)
    max_future_skew: Duration = timedelta(minutes=15)
    commit_delay: Duration = timedelta(0)
    # An hour not sealed by end + commit_delay + seal_grace is overdue: the ingest DAG's
    # check_deadlines task fails and the health page lists it.
    seal_grace: Duration = timedelta(minutes=30)
    # Event times older than the batch's clock - max_event_age are refused (dirty, reason
    # event_time_too_old) or kept as late rows (too_old: late); unset: no lower bound beyond
    # 1900-01-01. One record of 1970 would otherwise make the first seal walk every hour since.
    max_event_age: Duration | None = None
    too_old: Literal["dirty", "late"] = "dirty"


class DirtyConfig(_Strict):
    max_dirty_ratio: float = Field(default=0.05, ge=0, le=1)


class OutputConfig(_Strict):
    target_file_size: Size = 128 * 1024 * 1024
    # the sealed hours' file format and compression (tableformat.py); Hive DDL STORED AS it
    format: Literal["parquet", "orc"] = "parquet"
    compression: Literal["snappy", "zstd", "lz4", "gzip", "zlib", "none"] = "snappy"
    table_format: Literal["hive", "iceberg"] = "hive"  # hive partitions, or hourcommit/iceberg.py
    layout: Literal["auto", "in_place", "versioned"] = "auto"  # hourcommit/__init__.py
    # A replaced version stays readable this long for queries that listed it (an object store's
    # hour: processing time; a Delta/Iceberg snapshot's, a dropped hour's files: wall clock).
    version_retention: Duration = timedelta(hours=24)

    def files_for(self, size: int) -> int:
        """Files of about ``target_file_size`` for ``size`` bytes (at least one)."""
        return max(1, math.ceil(size / self.target_file_size))


class StreamConfig(_Strict):
    """The continuous writer (``tidemark switch --to stream``): how often it plans a
    micro-batch, and how often it commits one with no records, so the processing time moves
    and quiet MQ partitions stop holding hours back (``idle_timeout``), as the batch DAG's
    empty runs do. A micro-batch reads at most ``source.max_records_per_partition`` per MQ
    partition: a backlog drains in bounded batches."""

    trigger_interval: Duration = timedelta(seconds=10)
    idle_commit_interval: Duration = timedelta(minutes=1)


class QualityConfig(_Strict):
    policy: Literal["block", "warn"] = "block"
    default_expectations: bool = True
    expectations: list[dict[str, Any]] = Field(default_factory=list)


class TableConfig(_Strict):
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
            problems.append(f"output.format: {self.output.format}: an Iceberg table is Parquet")
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
    def late_table(self) -> str:
        return f"{self.table}__late"

    @property
    def consumer_group(self) -> str:
        return self.source.consumer_group or f"tidemark-{self.table}"


def _allowed_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys a model accepts at ``loc`` (to say what was expected for an unknown key)."""
    model: Any = TableConfig
    for part in loc[:-1]:
        fields = getattr(model, "model_fields", None)
        if not fields:
            return []
        by_alias = {f.alias or n: f for n, f in fields.items()}
        info = by_alias.get(str(part))
        if info is None:
            return []
        model = info.annotation
        if getattr(model, "__args__", None):  # Optional[X] -> X
            model = next((a for a in model.__args__ if hasattr(a, "model_fields")), None)
    fields = getattr(model, "model_fields", {})
    return sorted((f.alias or n) for n, f in fields.items())


def _describe(error: Any) -> str:
    loc = tuple(error["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    kind = error["type"]
    msg = str(error["msg"]).removeprefix("Value error, ")
    if not loc:  # cross-field checks name their own keys, one per line
        return msg
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc)
        return f"{key}: unknown key" + (f"; expected one of: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return f"{key}: missing required key"
    if kind in {"literal_error", "int_parsing", "float_parsing", "greater_than", "less_than_equal"}:
        return f"{key}: {msg} (got {error.get('input')!r})"
    return f"{key}: {msg}"


def parse_table(data: object, source: str) -> TableConfig:
    """Validate already-loaded YAML data; ``source`` names the file in errors."""
    if not isinstance(data, dict):
        raise ConfigError(source, ["(top level): expected a mapping of keys such as table, source, schema"])
    try:
        return TableConfig.model_validate(data)
    except ValidationError as exc:
        problems = [line for e in exc.errors() for line in _describe(e).splitlines()]
        raise ConfigError(source, problems) from None


def load_table_file(path: Path) -> TableConfig:
    """Load and validate one table YAML; the table name must match the file name."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"(top level): not valid YAML: {exc}"]) from None
    config = parse_table(read_schema_files(data, str(path), path.parent), str(path))
    if config.table != path.stem:
        raise ConfigError(str(path), [f"table: {config.table!r} must match the file name {path.stem!r}"])
    return config


def table_files(settings: Settings | None = None) -> list[Path]:
    settings = settings or Settings.from_env()
    return sorted(settings.conf_dir.glob("*.yaml"))


def expectation_columns(kwargs: dict[str, Any]) -> list[str]:
    """The columns an expectation's kwargs name (column, column_list, column_A/B)."""
    named = [kwargs.get(k) for k in ("column", "column_A", "column_B")] + list(
        kwargs.get("column_list") or []
    )
    return [c for c in named if isinstance(c, str)]


def effective_config(config: TableConfig) -> dict[str, Any]:
    """The configuration a table runs with, defaults included, as a person reads it: durations
    as ``10m``, columns as their DDL, secrets in ``kafka_properties`` masked."""

    def readable(value: Any) -> Any:
        if isinstance(value, timedelta):
            return format_duration(value)
        if isinstance(value, dict):
            return {k: readable(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [readable(v) for v in value]
        return value

    data = readable(config.model_dump(mode="python", by_alias=True, exclude={"columns"}))
    data["source"]["kafka_properties"] = masked(config.source.kafka_properties)
    if config.source.schema_registry is not None:
        data["source"]["schema_registry"] = masked(config.source.schema_registry.client_properties())
    columns = {c.name: c.type.ddl() + ("" if c.nullable else " not null") for c in config.schema_columns}
    return {"table": data.pop("table"), "description": data.pop("description"), "schema": columns, **data}
