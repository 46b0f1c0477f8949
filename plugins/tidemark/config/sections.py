"""The smaller sections of a table YAML, one model each: ``event_time:``, ``partitioning:``,
``watermark:``, ``dirty:``, ``output:``, ``stream:``, ``quality:``. The ``source:``,
``retention:``/``compaction:`` and ``cdc:`` sections have modules of their own; the table's
model (``config.table``) holds them all and checks them against each other."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tidemark.config.source import Size
from tidemark.durations import Duration


class Section(BaseModel):
    """A section of the YAML: unknown keys refused, the values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class EventTimeConfig(Section):
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


class PartitioningConfig(Section):
    granularity: Literal["hour"] = "hour"
    # Extra partition columns whose values come from the data (e.g. app); validated per row.
    columns: list[str] = Field(default_factory=list)
    max_values_per_column: int = Field(default=64, gt=0)


class WatermarkConfig(Section):
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


class DirtyConfig(Section):
    max_dirty_ratio: float = Field(default=0.05, ge=0, le=1)


class OutputConfig(Section):
    target_file_size: Size = 128 * 1024 * 1024
    # the sealed hours' file format and compression (tableformat.py); Hive DDL STORED AS it
    format: Literal["parquet", "orc"] = "parquet"
    compression: Literal["snappy", "zstd", "lz4", "gzip", "zlib", "none"] = "snappy"
    table_format: Literal["hive", "iceberg"] = "hive"  # hive partitions, or hourcommit/iceberg.py
    layout: Literal["auto", "in_place", "versioned"] = "auto"  # hourcommit/__init__.py
    # A replaced version stays readable this long for queries that listed it (an object store's
    # hour: processing time; a Delta/Iceberg snapshot's, a dropped hour's files: wall clock).
    version_retention: Duration = timedelta(hours=24)
    # the fresh read beside the complete one (tidemark/fresh): an Iceberg table's branch
    # ``fresh`` holds every committed batch as soon as it commits (a Hive table: none yet)
    fresh: bool = True
    # how long an hour's batch files (and amended late files) stay after the fresh read stops
    # naming them: a query that planned on it a moment before still reads every file
    fresh_grace: Duration = timedelta(hours=1)

    def files_for(self, size: int) -> int:
        """Files of about ``target_file_size`` for ``size`` bytes (at least one)."""
        return max(1, math.ceil(size / self.target_file_size))


class StreamConfig(Section):
    """The continuous writer (``tidemark switch --to stream``): how often it plans a
    micro-batch, and how often it commits one with no records, so the processing time moves
    and quiet MQ partitions stop holding hours back (``idle_timeout``), as the batch DAG's
    empty runs do. A micro-batch reads at most ``source.max_records_per_partition`` per MQ
    partition: a backlog drains in bounded batches."""

    # 5 s: the fresh read's goal (a record readable within 5 s at the median, docs/benchmarks.md)
    trigger_interval: Duration = timedelta(seconds=5)
    idle_commit_interval: Duration = timedelta(minutes=1)


class QualityConfig(Section):
    policy: Literal["block", "warn"] = "block"
    default_expectations: bool = True
    expectations: list[dict[str, Any]] = Field(default_factory=list)


def expectation_columns(kwargs: dict[str, Any]) -> list[str]:
    """The columns an expectation's kwargs name (column, column_list, column_A/B)."""
    named = [kwargs.get(k) for k in ("column", "column_A", "column_B")] + list(
        kwargs.get("column_list") or []
    )
    return [c for c in named if isinstance(c, str)]
