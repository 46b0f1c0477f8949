"""A Spark Python data source that reads exact offset ranges of a Kafka-protocol topic.

Maven Central is out of reach here, so spark-sql-kafka cannot be had; this source does the job
with confluent-kafka and ``assign()`` (no group membership, no rebalancing). Each planned
partition range is split into sub-ranges for parallelism; a task never reads past its end,
and it fails loudly, naming topic, partition and offsets, if it cannot reach it.

Every sub-range writes a receipt (records read, first/last offset) next to the batch's staging
files: reconciliation compares these independent counts with the rows and dirty records
written.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

SOURCE_NAME = "tidemark_kafka"
RAW_SCHEMA = "mq_partition int, mq_offset bigint, mq_timestamp bigint, key binary, value binary"
DEFAULT_SUBRANGE = 250_000
ARROW_BATCH_ROWS = 20_000
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
    """Split [start, end) ranges into sub-ranges of at most ``max_size`` offsets."""
    out = []
    for r in ranges:
        start, end = int(r["start"]), int(r["end"])
        while start < end:
            stop = min(end, start + max_size)
            out.append(SubRange(int(r["partition"]), start, stop))
            start = stop
    return out


class KafkaRangeDataSource(DataSource):
    """Options: ``topic``, ``ranges`` (JSON list of {partition,start,end}), ``receipts`` (dir),
    ``subrange`` (max offsets per task) and ``secret.kafka_conf`` (JSON librdkafka config; the
    option name matches Spark's redaction pattern so it never shows in plans or the UI)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return RAW_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaRangeReader(dict(self.options))


class KafkaRangeReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.topic = options["topic"]
        self.ranges = json.loads(options["ranges"])
        self.conf = json.loads(options["secret.kafka_conf"])
        self.receipts = options["receipts"]
        self.subrange = int(options.get("subrange", DEFAULT_SUBRANGE))

    def partitions(self) -> list[InputPartition]:
        return list(split_ranges(self.ranges, self.subrange))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SubRange)
        yield from read_subrange(self.topic, partition, self.conf, Path(self.receipts))


def _arrow_batch(columns: list[list[Any]]) -> Any:
    import pyarrow as pa

    schema = pa.schema(
        [
            pa.field("mq_partition", pa.int32()),
            pa.field("mq_offset", pa.int64()),
            pa.field("mq_timestamp", pa.int64()),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
        ]
    )
    return pa.RecordBatch.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)], schema=schema
    )


def read_subrange(topic: str, sub: SubRange, conf: dict[str, Any], receipts: Path) -> Iterator[Any]:
    """Yield Arrow batches of offsets [start, end) of one partition, then write its receipt."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from tidemark.faults import crash_point

    consumer = Consumer({**READER_SETTINGS, **conf})
    where = f"{topic}[{sub.partition}] offsets {sub.start}..{sub.end - 1}"
    consumer.assign([TopicPartition(topic, sub.partition, sub.start)])
    columns: list[list[Any]] = [[], [], [], [], []]
    read = 0
    first = last = None
    position = sub.start
    last_progress = time.monotonic()
    batches = 0
    try:
        while position < sub.end:
            messages = consumer.consume(num_messages=min(10_000, sub.end - position), timeout=1.0)
            if not messages and time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise RuntimeError(
                    f"reading {where}: no progress for {STALL_TIMEOUT_S:.0f}s at offset {position} "
                    f"(broker {conf.get('bootstrap.servers')})"
                )
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # Gaps at the end (compaction, transaction markers): the partition has
                        # nothing more up to its high watermark.
                        if (msg.offset() or 0) >= sub.end:
                            position = sub.end
                        continue
                    raise RuntimeError(f"reading {where}: {err}")
                offset = int(msg.offset() or 0)
                if offset >= sub.end:
                    position = sub.end
                    break
                _, ts = msg.timestamp()
                columns[0].append(sub.partition)
                columns[1].append(offset)
                columns[2].append(ts)
                columns[3].append(msg.key())
                columns[4].append(msg.value())
                read += 1
                first = offset if first is None else first
                last = offset
                position = offset + 1
                last_progress = time.monotonic()
            if len(columns[0]) >= ARROW_BATCH_ROWS:
                yield _arrow_batch(columns)
                columns = [[], [], [], [], []]
                batches += 1
                if batches == 1:
                    crash_point("mid_read")
        if columns[0]:
            yield _arrow_batch(columns)
            crash_point("mid_read")
    finally:
        consumer.close()
    receipts.mkdir(parents=True, exist_ok=True)
    receipt = {
        "partition": sub.partition,
        "start": sub.start,
        "end": sub.end,
        "read": read,
        "first": first,
        "last": last,
    }
    tmp = receipts / f".{sub.partition}-{sub.start}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(receipt))
    os.replace(tmp, receipts / f"{sub.partition}-{sub.start}-{sub.end}.json")


def read_receipts(receipts: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(receipts.glob("*.json"))]


def read_ranges(
    spark: Any, topic: str, ranges: Sequence[dict[str, int]], kafka_conf: dict[str, Any], receipts: Path
) -> Any:
    """The raw records (RAW_SCHEMA) of exactly ``ranges`` of ``topic``, as a DataFrame; each
    sub-range read writes its receipt under ``receipts``."""
    spark.dataSource.register(KafkaRangeDataSource)
    return (
        spark.read.format(KafkaRangeDataSource.name())
        .option("topic", topic)
        .option("ranges", json.dumps([dict(r) for r in ranges if int(r["end"]) > int(r["start"])]))
        .option("secret.kafka_conf", json.dumps(kafka_conf))
        .option("receipts", str(receipts))
        .load()
    )
