"""Reading exact offset ranges of one MQ partition with confluent-kafka and ``assign()`` (no
group membership, no rebalancing): a planned range is split into sub-ranges for parallelism,
a reader never reads past its end, and it fails loudly, naming topic, MQ partition and
offsets, when it cannot reach it. Each sub-range read leaves a receipt (records read, first
and last offset) that reconciliation compares with what was written."""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition  # noqa: TID253

from tidemark.ingest.spec import RawRecords
from tidemark.tablefs import Store

DEFAULT_SUBRANGE = 250_000
BLOCK_ROWS = 20_000  # records classified at a time ...
# ... and bytes: many messages just under max_message_bytes must not make a block of gigabytes
# (a block is at most this plus one consume call, which librdkafka's queue bounds).
BLOCK_BYTES = 16 << 20
STALL_TIMEOUT_S = 60.0
# librdkafka settings of a range reader (the benchmark's baselines use the same)
READER_SETTINGS: dict[str, Any] = {
    "group.id": "tidemark-reader",
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "fetch.queue.backoff.ms": 1,  # the default (1000) idles the consumer 60% of the time
    "auto.offset.reset": "error",
    "isolation.level": "read_committed",
    "enable.auto.offset.store": False,
}


@dataclass(frozen=True)
class SubRange(InputPartition):
    mq_partition: int
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
                    int(r["mq_partition"]),
                    start + (end - start) * i // parts,
                    start + (end - start) * (i + 1) // parts,
                )
            )
    return out


class RangeConsumer:
    """Consumes offsets [start, end) of one partition in blocks; counts what it read."""

    def __init__(self, topic: str, sub: SubRange, conf: dict[str, Any]) -> None:
        self.topic = topic
        self.sub = sub
        self.conf = conf
        self.read = 0
        self.first: int | None = None
        self.last: int | None = None
        self.started: float | None = None  # the read's start (its seconds go in the receipt)

    def blocks(self) -> Iterator[RawRecords]:
        """Blocks of up to BLOCK_ROWS records or about BLOCK_BYTES, in offset order."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        sub = self.sub
        self.started = time.monotonic()
        consumer = Consumer({**self.conf, **READER_SETTINGS})  # the reader's settings win
        where = f"{self.topic}[{sub.mq_partition}] offsets {sub.start}..{sub.end - 1}"
        consumer.assign([TopicPartition(self.topic, sub.mq_partition, sub.start)])
        block = RawRecords(sub.mq_partition, [], [], [], [])
        block_bytes = 0
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
                    values = [m.value() for m in messages]
                    block.values += values
                    block_bytes += sum([len(v) for v in values if v is not None])
                    position = max(position, offsets[-1] + 1)
                    last_progress = time.monotonic()
                if len(block) >= BLOCK_ROWS or block_bytes >= BLOCK_BYTES:
                    yield self._counted(block)
                    block = RawRecords(sub.mq_partition, [], [], [], [])
                    block_bytes = 0
            if len(block):
                yield self._counted(block)
        finally:
            consumer.close()

    def _counted(self, block: RawRecords) -> RawRecords:
        self.read += len(block)
        self.first = block.offsets[0] if self.first is None else self.first
        self.last = block.offsets[-1]
        return block

    def write_receipt(self, store: Store, receipts: str) -> None:
        """The sub-range's receipt, whole (a retried task rewrites the same name)."""
        sub = self.sub
        receipt = {
            "mq_partition": sub.mq_partition,
            "start": sub.start,
            "end": sub.end,
            "read": self.read,
            "first": self.first,
            "last": self.last,
            # reading and staging the sub-range, in its task (the progress line per MQ partition)
            "seconds": round(time.monotonic() - self.started, 3) if self.started is not None else None,
        }
        name = f"{sub.mq_partition}-{sub.start}-{sub.end}.json"
        store.write_json(f"{receipts}/{name}" if receipts else name, receipt)


def read_receipts(store: Store, receipts: str) -> list[dict[str, Any]]:
    return [store.read_json(f) for f in store.files(receipts, suffix=".json")]
