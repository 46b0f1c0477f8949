"""A Spark Python data source that reads exact offset ranges of a Kafka-protocol topic.

Maven Central is out of reach here, so spark-sql-kafka cannot be had; this source does the job
with confluent-kafka and ``assign()`` (no group membership, no rebalancing). Each planned
partition range is split into sub-ranges for parallelism; a task never reads past its end,
and it fails loudly, naming topic, partition and offsets, if it cannot reach it.

A task classifies what it reads where that is cheapest, in Arrow (``tidemark.transform``).
Two ways run the same per-sub-range code:

- :func:`stage_ranges`, the dump's path: plain Spark tasks (one per sub-range) that also write
  their rows, late rows and dirty records as Parquet files under the batch's staging directory
  (``tidemark.staging``) and return only their counts. Records never cross into the JVM, and
  no DataFrame is planned: the Python data source's planning starts three extra Python
  processes per job, which cost about 5 s per batch on 2 cores (docs/benchmarks.md).
- the data source (:func:`read_ranges`): the classified records as a DataFrame
  (``transform.classified_ddl``), for the paths that need Spark over the whole batch (tables
  with data-derived partition columns, rebuilds).

Every sub-range writes a receipt (records read, first/last offset) next to the batch's staging
files, after its files: reconciliation compares these independent counts with the rows and
dirty records written.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from tidemark.transform import ClassifySpec, RawRecords

SOURCE_NAME = "tidemark_kafka"
DEFAULT_SUBRANGE = 250_000
BLOCK_ROWS = 20_000  # records classified at a time
STALL_TIMEOUT_S = 60.0
# librdkafka settings of a range reader (the benchmark's baselines use the same)
READER_SETTINGS: dict[str, Any] = {
    "group.id": "tidemark-reader",
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "fetch.queue.backoff.ms": 1,  # the default (1000) idles the consumer 60% of the time
    "auto.offset.reset": "error",
}


@dataclass(frozen=True)
class SubRange(InputPartition):
    partition: int
    start: int
    end: int


def split_ranges(ranges: Sequence[dict[str, int]], max_size: int) -> list[SubRange]:
    """Split each [start, end) range into the fewest equal sub-ranges of at most ``max_size``
    offsets (no one-record tail task)."""
    out = []
    for r in ranges:
        start, end = int(r["start"]), int(r["end"])
        parts = -(-(end - start) // max_size)
        for i in range(parts):
            out.append(
                SubRange(
                    int(r["partition"]),
                    start + (end - start) * i // parts,
                    start + (end - start) * (i + 1) // parts,
                )
            )
    return out


class KafkaRangeDataSource(DataSource):
    """Options: ``topic``, ``ranges`` (JSON list of {partition,start,end}), ``receipts`` (dir),
    ``spec`` (a ClassifySpec as JSON), ``subrange`` (max offsets per task) and
    ``secret.kafka_conf`` (JSON librdkafka config; the option name matches Spark's redaction
    pattern so it never shows in plans or the UI)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        from tidemark.transform import classified_ddl

        return classified_ddl(ClassifySpec.from_json(self.options["spec"]))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaRangeReader(dict(self.options))


class KafkaRangeReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.topic = options["topic"]
        self.ranges = json.loads(options["ranges"])
        self.conf = json.loads(options["secret.kafka_conf"])
        self.receipts = options["receipts"]
        self.subrange = int(options.get("subrange", DEFAULT_SUBRANGE))
        self.spec = options["spec"]

    def partitions(self) -> list[InputPartition]:
        return list(split_ranges(self.ranges, self.subrange))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from tidemark.faults import crash_point
        from tidemark.transform import Classifier, as_classified

        assert isinstance(partition, SubRange)
        spec = ClassifySpec.from_json(self.spec)
        classifier = Classifier(spec)
        reader = RangeConsumer(self.topic, partition, self.conf)
        for i, block in enumerate(reader.blocks()):
            yield from as_classified(classifier.classify(block), spec).to_batches()
            if i == 0:
                crash_point("mid_read")
        reader.write_receipt(Path(self.receipts))


def stage_subranges(
    subs: Iterable[SubRange],
    *,
    topic: str,
    conf: dict[str, Any],
    spec_json: str,
    staging: str,
    receipts: str,
) -> Iterator[dict[str, Any]]:
    """One Spark task: read, classify and stage each sub-range; its files first, then its
    receipt, then its counts (``staging.TaskStager.stats``)."""
    from tidemark.faults import crash_point
    from tidemark.staging import TaskStager
    from tidemark.transform import Classifier

    spec = ClassifySpec.from_json(spec_json)
    classifier = Classifier(spec)
    for sub in subs:
        stager = TaskStager(Path(staging), spec, sub.partition, sub.start)
        reader = RangeConsumer(topic, sub, conf)
        for i, block in enumerate(reader.blocks()):
            stager.add(classifier.classify(block))
            if i == 0:
                crash_point("mid_read")
        stager.close()
        reader.write_receipt(Path(receipts))
        yield from stager.stats()


class RangeConsumer:
    """Consumes offsets [start, end) of one partition in blocks; counts what it read."""

    def __init__(self, topic: str, sub: SubRange, conf: dict[str, Any]) -> None:
        self.topic = topic
        self.sub = sub
        self.conf = conf
        self.read = 0
        self.first: int | None = None
        self.last: int | None = None

    def blocks(self) -> Iterator[RawRecords]:
        """Blocks of up to BLOCK_ROWS records, in offset order."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        sub = self.sub
        consumer = Consumer({**READER_SETTINGS, **self.conf})
        where = f"{self.topic}[{sub.partition}] offsets {sub.start}..{sub.end - 1}"
        consumer.assign([TopicPartition(self.topic, sub.partition, sub.start)])
        block = RawRecords(sub.partition, [], [], [], [])
        position = sub.start
        last_progress = time.monotonic()
        try:
            while position < sub.end:
                messages = consumer.consume(num_messages=min(10_000, sub.end - position), timeout=1.0)
                if not messages and time.monotonic() - last_progress > STALL_TIMEOUT_S:
                    raise RuntimeError(
                        f"reading {where}: no progress for {STALL_TIMEOUT_S:.0f}s at offset {position} "
                        f"(broker {self.conf.get('bootstrap.servers')})"
                    )
                # Whole-batch list comprehensions: a per-message loop was the task's largest
                # cost (about 2 us a message of Python overhead).
                if any([m.error() is not None for m in messages]):
                    for msg in messages:
                        err = msg.error()
                        if err is None:
                            continue
                        if err.code() != KafkaError._PARTITION_EOF:
                            raise RuntimeError(f"reading {where}: {err}")
                        # Gaps at the end (compaction, transaction markers): the partition has
                        # nothing more up to its high watermark.
                        if (msg.offset() or 0) >= sub.end:
                            position = sub.end
                    messages = [m for m in messages if m.error() is None]
                if not messages:
                    continue
                offsets: list[int] = [m.offset() for m in messages]  # type: ignore[misc]  # set on records
                if offsets[-1] >= sub.end:  # never past the planned end
                    keep = bisect.bisect_left(offsets, sub.end)
                    messages, offsets = messages[:keep], offsets[:keep]
                    position = sub.end
                if offsets:
                    block.offsets += offsets
                    block.timestamps += [m.timestamp()[1] for m in messages]
                    block.keys += [m.key() for m in messages]
                    block.values += [m.value() for m in messages]
                    position = max(position, offsets[-1] + 1)
                    last_progress = time.monotonic()
                if len(block) >= BLOCK_ROWS:
                    yield self._counted(block)
                    block = RawRecords(sub.partition, [], [], [], [])
            if len(block):
                yield self._counted(block)
        finally:
            consumer.close()

    def _counted(self, block: RawRecords) -> RawRecords:
        self.read += len(block)
        self.first = block.offsets[0] if self.first is None else self.first
        self.last = block.offsets[-1]
        return block

    def write_receipt(self, receipts: Path) -> None:
        sub = self.sub
        receipts.mkdir(parents=True, exist_ok=True)
        receipt = {
            "partition": sub.partition,
            "start": sub.start,
            "end": sub.end,
            "read": self.read,
            "first": self.first,
            "last": self.last,
        }
        tmp = receipts / f".{sub.partition}-{sub.start}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(receipt))
        os.replace(tmp, receipts / f"{sub.partition}-{sub.start}-{sub.end}.json")


def read_receipts(receipts: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(receipts.glob("*.json"))]


def read_ranges(
    spark: Any,
    topic: str,
    ranges: Sequence[dict[str, int]],
    *,
    kafka_conf: dict[str, Any],
    receipts: Path,
    spec: ClassifySpec,
) -> Any:
    """The classified records of exactly ``ranges`` of ``topic``, as a DataFrame; each
    sub-range read writes its receipt under ``receipts``."""
    spark.dataSource.register(KafkaRangeDataSource)
    return (
        spark.read.format(KafkaRangeDataSource.name())
        .option("topic", topic)
        .option("ranges", json.dumps([dict(r) for r in ranges if int(r["end"]) > int(r["start"])]))
        .option("secret.kafka_conf", json.dumps(kafka_conf))
        .option("receipts", str(receipts))
        .option("spec", spec.to_json())
        .load()
    )


def stage_ranges(
    spark: Any,
    topic: str,
    ranges: Sequence[dict[str, int]],
    *,
    kafka_conf: dict[str, Any],
    receipts: Path,
    spec: ClassifySpec,
    staging: Path,
) -> list[dict[str, Any]]:
    """Stage exactly ``ranges`` of ``topic`` under ``staging``, one Spark task per sub-range;
    return the tasks' counts per MQ partition, hour, lateness and reason."""
    subs = split_ranges(ranges, DEFAULT_SUBRANGE)
    if not subs:
        return []
    task = functools.partial(
        stage_subranges,
        topic=topic,
        conf=kafka_conf,
        spec_json=spec.to_json(),
        staging=str(staging),
        receipts=str(receipts),
    )
    result: list[dict[str, Any]] = (
        spark.sparkContext.parallelize(subs, len(subs)).mapPartitions(task).collect()
    )
    return result
