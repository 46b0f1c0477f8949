"""A batch's records in the commit log: its offset plan (``Plan``: the ranges per MQ partition,
written before anything is read) and its commit (``Commit``: what it read and wrote, with
per-MQ-partition counts). ``commitlog`` keeps them; everything that plans, commits, resolves or
reports a batch reads them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from tidemark.compat import renamed
from tidemark.time.watermarks import MqWatermark, ReadyTime


@dataclass(frozen=True)
class MqRange:
    """Offsets [start, end) of one MQ partition; ``gap`` records offsets lost to retention."""

    mq_partition: int
    start: int
    end: int
    gap_from: int | None = None
    gap_to: int | None = None

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MqRange:
        return cls(**renamed(data, partition="mq_partition"))


@dataclass(frozen=True)
class Plan:
    """What a batch will read, fixed before reading. ``processing_time`` is decided once here
    so a retry judges future event times exactly as the first attempt did."""

    table: str
    batch_id: int
    run_id: str
    topic: str
    processing_time: str
    ranges: tuple[MqRange, ...]
    # Records with an event time before this instant belong to sealed hours: they are late.
    # Decided at planning time so a retry classifies exactly as the first attempt did.
    sealed_through: str | None = None
    # The wall clock when the plan was made (first attempt): future event times are judged
    # against it, never against the run's logical time, so a run cleared, queued or backfilled
    # hours later does not mark current records as future (plans before it used processing_time).
    planned_at: str | None = None
    # A replay of dirty records (``ingest.replay``): {"batches": [...], "audit_seq": n}. Such a
    # batch reads no offsets: it classifies those batches' dirty records again.
    replay: dict[str, Any] | None = None
    # The table's schema version when the batch was planned (``tidemark.evolution``): a retry
    # after a schema change classifies and writes as the first attempt did (None: before 0.9).
    schema_version: int | None = None
    # the broker's id of the topic when planned (Kafka's topic id): a topic deleted and created
    # again under the same name has another, and its offsets mean other records
    topic_id: str | None = None

    @property
    def replayed_batches(self) -> tuple[int, ...]:
        return tuple(int(b) for b in self.replay["batches"]) if self.replay else ()

    @property
    def clock(self) -> str:
        """The instant future event times of this batch are judged against."""
        return self.planned_at or self.processing_time

    @property
    def records_planned(self) -> int:
        return sum(r.size for r in self.ranges)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        ranges = tuple(MqRange.from_json(r) for r in data.pop("ranges"))
        return cls(ranges=ranges, **data)

    def describe(self) -> str:
        if self.replay:
            batches = ", ".join(str(b) for b in self.replayed_batches)
            return (
                f"batch {self.batch_id} (run {self.run_id}): replay of the dirty records of batches {batches}"
            )
        parts = ", ".join(f"{self.topic}[{r.mq_partition}] {r.start}..{r.end}" for r in self.ranges)
        return f"batch {self.batch_id} (run {self.run_id}): {parts or 'no partitions'}"


@dataclass(frozen=True)
class MqPartitionStats:
    """What one MQ partition contributed to a batch."""

    mq_partition: int
    read: int
    rows: int
    dirty: int
    late: int = 0
    min_event_time: str | None = None
    max_event_time: str | None = None
    tombstones: int = 0  # messages without a value: in the dirty files, never counted as dirty


@dataclass(frozen=True)
class Commit:
    """The commit record: binds run id, offsets, files and counts of a batch."""

    table: str
    batch_id: int
    run_id: str
    committed_by_run: str
    topic: str
    processing_time: str
    ranges: tuple[MqRange, ...]
    files: tuple[str, ...]
    rows_per_hour: dict[str, int]
    mq_partitions: tuple[MqPartitionStats, ...]
    dirty: int
    rows: int
    late: int = 0
    late_per_hour: dict[str, int] = field(default_factory=dict)
    watermarks: tuple[MqWatermark, ...] = ()
    ready: ReadyTime | None = None
    # values of data-derived partition columns this batch admitted, per hour (cardinality.py)
    partition_values: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Commit:
        data = renamed(
            data,
            partitions="mq_partitions",
            rows_per_partition="rows_per_hour",
            late_per_partition="late_per_hour",
        )
        data["ranges"] = tuple(MqRange.from_json(r) for r in data["ranges"])
        data["mq_partitions"] = tuple(
            MqPartitionStats(**renamed(p, partition="mq_partition")) for p in data["mq_partitions"]
        )
        data["files"] = tuple(data["files"])
        data["watermarks"] = tuple(MqWatermark.from_json(w) for w in data.get("watermarks", ()))
        data["ready"] = ReadyTime.from_json(data["ready"]) if data.get("ready") else None
        return cls(**data)

    @property
    def end_offsets(self) -> dict[int, int]:
        return {r.mq_partition: r.end for r in self.ranges}

    @property
    def replayed_batches(self) -> tuple[int, ...]:
        """The batches whose dirty records this batch classified again (a replay), else ()."""
        return tuple(int(b) for b in self.extra.get("replay", {}).get("batches", ()))

    @property
    def tombstones(self) -> int:
        """Messages without a value: kept in the dirty files, counted apart from dirty."""
        return sum(p.tombstones for p in self.mq_partitions)

    @property
    def read(self) -> int:
        return sum(p.read for p in self.mq_partitions)

    @property
    def spanned(self) -> int:
        """Offsets the batch's ranges span (0 for a replay, which reads dirty records)."""
        return sum(r.size for r in self.ranges)

    @property
    def without_message(self) -> int:
        """Spanned offsets that held no message: transaction markers, aborted records,
        compacted keys (the broker does not tell a consumer which)."""
        return max(0, self.spanned - self.read) if self.ranges else 0

    def reconciliation(self) -> str:
        """``read N == rows + dirty + tombstones + late``, with the numbers, and whether it holds
        (a replay reads dirty records again, not offsets: it balances what it took over)."""
        late = sum(p.late for p in self.mq_partitions)
        rows = sum(p.rows for p in self.mq_partitions)
        dirty = sum(p.dirty for p in self.mq_partitions)
        total = rows + dirty + self.tombstones + late
        verdict = "holds" if total == self.read else "DOES NOT HOLD"
        spans = (
            f"; offsets spanned {self.spanned} == read {self.read} + without a message {self.without_message}"
            if self.spanned
            else ""
        )
        return (
            f"read {self.read} == rows {rows} + dirty {dirty} + tombstones {self.tombstones} + late {late}: "
            f"{verdict}{spans}"
        )

    @property
    def dirty_replaced(self) -> int:
        """Dirty records of earlier batches that this replay took over (rows now, or dirty again)."""
        return int(self.extra.get("replay", {}).get("dirty_replaced", 0))

    @property
    def tombstones_replaced(self) -> int:
        """Tombstones of earlier batches that this replay read again (and counts again): each
        message is counted once, by the last batch that holds it."""
        return int(self.extra.get("replay", {}).get("tombstones_replaced", 0))
