"""The per-table commit log: the source of truth for what each batch read and wrote.

Layout under ``<state dir>/<table>/log`` (``$TIDEMARK_HOME/state`` or ``TIDEMARK_STATE_DIR``,
which may be an ``hdfs://`` URI: every record goes through ``tidemark.state.storage``)::

    plans/<batch>.json      offset plan, written before any data is read (create-only)
    commits/<batch>.json    commit record; its existence makes the batch visible (create-only)
    runs/<run key>.json     run id -> batch id, so a retry finds its plan in O(1) (create-only)
    checkpoint.json         compacted summary up to some batch (atomically replaced)

Plans and commits are two sequential logs (``seqlog``): never overwritten, a second writer of
the same record loses with BatchConflictError. Reading the state costs the checkpoint plus the
commits after it, probed by sequential name.

Words: an *MQ partition* is a partition of the topic (``mq_partition``); an *hour* is an hour
partition of the table, keyed by its path ``dt=D/hr=H`` in ``rows_per_hour``. Records written
before these names (``partition``, ``partitions``, ``rows_per_partition``) are still read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tidemark.compat import renamed
from tidemark.errors import BatchConflictError
from tidemark.faults import crash_point
from tidemark.state.layout import run_key
from tidemark.state.partition_values import merge
from tidemark.state.seqlog import SequentialLog
from tidemark.state.storage import Location, create_only, read_json
from tidemark.time.watermarks import MqWatermark, ReadyTime

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 20


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


@dataclass
class LogState:
    """Summary of everything committed: next offsets, watermarks and running totals."""

    last_committed: int = -1
    end_offsets: dict[int, int] = field(default_factory=dict)
    rows: int = 0
    dirty: int = 0
    late: int = 0
    tombstones: int = 0
    lost_to_retention: int = 0  # offsets retention deleted before a batch read them (recorded gaps)
    without_message: int = 0  # spanned offsets that held no message (markers, aborted, compacted)
    topic_id: str | None = None  # the topic's id at the last commit that named one
    batches: int = 0
    rows_per_hour: dict[str, int] = field(default_factory=dict)
    late_per_hour: dict[str, int] = field(default_factory=dict)
    watermarks: dict[int, MqWatermark] = field(default_factory=dict)
    ready: ReadyTime | None = None
    partition_values: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # hour path -> [first, last] runs of consecutive batch ids that committed rows or late
    # rows for it: a rebuild plans from these instead of reading every commit record
    batches_per_hour: dict[str, list[list[int]]] = field(default_factory=dict)
    hour_index_from: int = 0  # the index covers batches from here (> 0: an older checkpoint's)

    def batches_of_hour(self, hour_path: str) -> list[int] | None:
        """The batches that committed rows or late rows for an hour, in order; None when the
        index does not cover every batch (a checkpoint of an older release)."""
        if self.hour_index_from > 0:
            return None
        return [b for first, last in self.batches_per_hour.get(hour_path, ()) for b in range(first, last + 1)]

    def apply(self, commit: Commit) -> None:
        self.last_committed = commit.batch_id
        self.end_offsets.update(commit.end_offsets)
        self.rows += commit.rows
        self.dirty += commit.dirty - commit.dirty_replaced
        self.late += commit.late
        self.tombstones += commit.tombstones - commit.tombstones_replaced
        self.without_message += commit.without_message
        if commit.extra.get("topic_id"):
            self.topic_id = str(commit.extra["topic_id"])
        if not commit.committed_by_run.startswith("resolve:skip"):  # an operator's skip is not a loss
            self.lost_to_retention += sum(
                r.gap_to - r.gap_from
                for r in commit.ranges
                if r.gap_from is not None and r.gap_to is not None
            )
        self.batches += 1
        for hour, n in commit.rows_per_hour.items():
            self.rows_per_hour[hour] = self.rows_per_hour.get(hour, 0) + n
        for hour, n in commit.late_per_hour.items():
            self.late_per_hour[hour] = self.late_per_hour.get(hour, 0) + n
        touched = {h for h, n in commit.rows_per_hour.items() if n} | {
            h for h, n in commit.late_per_hour.items() if n
        }
        for hour in touched:
            runs = self.batches_per_hour.setdefault(hour, [])
            if runs and runs[-1][1] == commit.batch_id - 1:
                runs[-1][1] = commit.batch_id
            else:
                runs.append([commit.batch_id, commit.batch_id])
        if commit.watermarks:
            self.watermarks = {w.mq_partition: w for w in commit.watermarks}
        if commit.ready is not None:
            self.ready = commit.ready
        if commit.partition_values:
            self.partition_values = merge(self.partition_values, commit.partition_values)
        for gone in commit.extra.get("dropped_mq_partitions", ()):  # an operator's rebase
            self.end_offsets.pop(int(gone), None)
            self.watermarks.pop(int(gone), None)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["watermarks"] = [asdict(w) for w in self.watermarks.values()]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogState:
        data = dict(data)
        data["end_offsets"] = {int(k): int(v) for k, v in data["end_offsets"].items()}
        marks = (MqWatermark.from_json(w) for w in data.get("watermarks", []))
        data["watermarks"] = {w.mq_partition: w for w in marks}
        data["ready"] = ReadyTime.from_json(data["ready"]) if data.get("ready") else None
        if "batches_per_hour" not in data:  # an older release's checkpoint: no hour index yet
            data["hour_index_from"] = int(data["last_committed"]) + 1
        return cls(**data)


class CommitLog:
    """Plans and commits of one table."""

    def __init__(self, state_dir: Location | Path, table: str) -> None:
        self.table = table
        self.state_dir = Location(state_dir)
        self.root = self.state_dir / table / "log"
        self.plans = self.root / "plans"
        self.commits = self.root / "commits"
        self.runs = self.root / "runs"
        self.checkpoint_file = self.root / "checkpoint.json"
        self.group_commit_file = self.root / "group_commit.json"  # last consumer-group commit (monitoring)
        self._plans = SequentialLog(self.plans)
        self._commits = SequentialLog(self.commits, self.checkpoint_file)

    # -- reading -------------------------------------------------------------------------
    def plan(self, batch_id: int) -> Plan | None:
        data = self._plans.read(batch_id)
        return Plan.from_json(data) if data else None

    def commit(self, batch_id: int) -> Commit | None:
        data = self._commits.read(batch_id)
        return Commit.from_json(data) if data else None

    def batch_of_run(self, run_id: str) -> int | None:
        data = read_json(self.runs / f"{run_key(run_id)}.json")
        return int(data["batch_id"]) if data else None

    def _checkpoint(self) -> LogState:
        data = self._commits.read_checkpoint()
        if not data or "tombstones" not in data:  # none, or an older release's: fold from batch 0
            return LogState()
        return LogState.from_json(data)

    def state(self) -> LogState:
        """Checkpoint + the commits after it, probed by name."""
        state = self._checkpoint()
        for commit in self.iter_commits(state.last_committed + 1):
            state.apply(commit)
        return state

    def iter_commits(self, since: int = 0) -> Iterator[Commit]:
        for _, data in self._commits.records(since):
            yield Commit.from_json(data)

    def pending_plan(self, state: LogState) -> Plan | None:
        """The plan of the first uncommitted batch, if one was persisted."""
        return self.plan(state.last_committed + 1)

    # -- writing -------------------------------------------------------------------------
    def write_plan(self, plan: Plan) -> None:
        if not self._plans.create(plan.batch_id, plan.to_json()):
            raise BatchConflictError(
                f"{self.table}: batch {plan.batch_id} was planned concurrently by another run; "
                "nothing was read or written by this one"
            )

    def bind_run(self, run_id: str, batch_id: int) -> int:
        """Record run -> batch (first binding wins); returns the bound batch id."""
        path = self.runs / f"{run_key(run_id)}.json"
        create_only(path, {"run_id": run_id, "batch_id": batch_id})
        bound = self.batch_of_run(run_id)
        assert bound is not None
        return bound

    def write_commit(self, commit: Commit) -> None:
        if not self._commits.create(commit.batch_id, commit.to_json()):
            raise BatchConflictError(
                f"{self.table}: batch {commit.batch_id} was committed by another process first; "
                "this attempt's files were not published"
            )
        if (commit.batch_id + 1) % CHECKPOINT_EVERY == 0:
            # A crash here loses only the checkpoint: readers probe on from the previous one.
            crash_point("before_checkpoint")
            self.write_checkpoint()

    def write_checkpoint(self) -> LogState:
        """Compact the committed state into checkpoint.json (atomic replace). The first
        checkpoint after an upgrade from a release without the hour index folds every commit
        once, so the index covers them all."""
        state = self.state()
        if state.hour_index_from > 0:
            log.info("%s: indexing the hours of %s batches once", self.table, state.last_committed + 1)
            state = LogState()
            for commit in self.iter_commits():
                state.apply(commit)
        self._commits.write_checkpoint(state.to_json())
        log.info("%s: commit log checkpoint at batch %s", self.table, state.last_committed)
        return state
