"""The stream's offsets: a Python streaming data source that plans micro-batches and reads
nothing itself.

Spark asks ``latestOffset()`` before every micro-batch and runs one over [previous end,
latest) when they differ; the query's checkpoint keeps each micro-batch's ends (its offset
log) before the batch runs. This source answers with the same rule the batch planner uses
(``planner.next_ranges``: from the committed ends of tidemark's commit log, capped at
``source.max_records_per_partition`` per MQ partition), so a backlog drains in bounded
micro-batches on Spark 4.1, whose JVM side of Python sources has neither ``ReadLimit`` nor
``Trigger.AvailableNow``. A micro-batch's rows are its ends (one row per MQ partition); the
stream's ``foreachBatch`` hands them to the dump protocol as the batch's caps, and the
dump's own tasks read and stage the records (``ingest.source.stage_ranges``: the same
``RangeConsumer`` + ``Classifier``). The commit log stays the truth: a checkpoint behind or
ahead of it only moves where the next batch may end, never where it starts.

The offset also carries a ``tick`` (wall-clock periods of ``stream.idle_commit_interval``),
so a quiet topic still gets a micro-batch now and then: its empty commit moves processing
time, which lets idle MQ partitions stop holding hours back. A catch-up run (``until``: the
broker's ends when it started) has no tick and stops planning once it reached them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition  # noqa: TID253
from pyspark.sql.types import StructType  # noqa: TID253

from tidemark.catalog import load_table
from tidemark.config import TableConfig
from tidemark.ingest.kafka import partition_offsets
from tidemark.ingest.planner import capped_offsets, next_ranges
from tidemark.settings import Settings
from tidemark.state.storage import Location
from tidemark.table import Table

SOURCE_NAME = "tidemark_stream_offsets"
SCHEMA = "mq_partition int, end_offset long"


def stream_offset(ends: Mapping[int, int], tick: int) -> dict[str, Any]:
    """The offset Spark keeps in its checkpoint: ends per MQ partition and the tick."""
    return {"ends": {str(p): int(e) for p, e in sorted(ends.items())}, "tick": tick}


def offset_ends(offset: Mapping[str, Any] | None) -> dict[int, int]:
    return {int(p): int(e) for p, e in ((offset or {}).get("ends") or {}).items()}


def next_ends(
    config: TableConfig,
    committed_ends: Mapping[int, int],
    broker_offsets: Mapping[int, tuple[int, int]],
    previous: Mapping[int, int],
    until: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """Where the next micro-batch may end per MQ partition: the batch planner's rule from the
    committed ends (``next_ranges``), never before an end already offered (Spark's offsets
    only move forward), and never past ``until`` (a catch-up run's target)."""

    if until is not None:
        broker_offsets = capped_offsets(broker_offsets, until, committed_ends)
    proposed = {r.mq_partition: r.end for r in next_ranges(config, committed_ends, broker_offsets)}
    return {p: max(e, previous.get(p, e)) for p, e in proposed.items()}


@dataclass(frozen=True)
class EndsPartition(InputPartition):
    ends: tuple[tuple[int, int], ...]


class StreamOffsetsSource(DataSource):
    """Options: ``table`` and ``conf_dir`` (its YAML), ``state`` (the state store's location),
    ``secret.kafka_conf`` (JSON librdkafka config; the name matches Spark's redaction pattern),
    ``tick_s`` (0: no ticks) and ``until`` (JSON ends of a catch-up run, or empty). Everything
    travels as options: the source's process inherits the environment of the JVM, which an
    in-process session started long before."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamOffsetsReader(dict(self.options))


class StreamOffsetsReader(DataSourceStreamReader):
    """Runs in the driver's Python source process; every answer reads the commit log."""

    def __init__(self, options: dict[str, str]) -> None:
        os.environ.update(json.loads(options.get("secret.env") or "{}"))  # the state store's S3 keys
        # a table file, or a family's member (its record is in the state store)
        settings = replace(
            Settings.from_env(), conf_dir=Path(options["conf_dir"]), state_uri=options["state"]
        )
        self.config = load_table(options["table"], settings)
        self.commit_log = Table.state_of(Location(options["state"]), self.config.table).commit_log
        self.kafka_conf = json.loads(options["secret.kafka_conf"])
        self.tick_s = float(options.get("tick_s") or 0)
        until = options.get("until") or ""
        self.until = {int(p): int(e) for p, e in json.loads(until).items()} if until else None
        self.offered: dict[int, int] = {}

    def _tick(self) -> int:
        return int(time.time() // self.tick_s) if self.tick_s > 0 else 0

    def initialOffset(self) -> dict[str, Any]:
        """A new query starts where the commit log ends (the batch DAG's last batch)."""
        return stream_offset(self.commit_log.state().end_offsets, 0)

    def latestOffset(self) -> dict[str, Any]:
        committed = self.commit_log.state().end_offsets
        broker = partition_offsets(self.kafka_conf, self.config.source.topic)
        self.offered = next_ends(self.config, committed, broker, self.offered, self.until)
        return stream_offset(self.offered, self._tick())

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return [EndsPartition(tuple(sorted(offset_ends(end).items())))]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int]]:
        assert isinstance(partition, EndsPartition)
        yield from partition.ends

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: tidemark's commit log, written by the micro-batch, is the truth."""
