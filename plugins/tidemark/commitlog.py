"""The per-table commit log: the source of truth for what each batch read and wrote.

Layout under ``<state dir>/<table>/log`` (``$TIDEMARK_HOME/state`` or ``TIDEMARK_STATE_DIR``,
which may be an ``hdfs://`` URI: every record goes through ``tidemark.storage``)::

    plans/<batch>.json      offset plan, written before any data is read (create-only)
    commits/<batch>.json    commit record; its existence makes the batch visible (create-only)
    runs/<run key>.json     run id -> batch id, so a retry finds its plan in O(1) (create-only)
    checkpoint.json         compacted summary up to some batch (atomically replaced)

Records are never overwritten: a second writer of the same record loses with
BatchConflictError. Reading the state costs the checkpoint plus the commits after it (probed
by sequential name, never by listing a directory that grows forever - the failure mode of
Spark's file-sink metadata log).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tidemark.cardinality import merge
from tidemark.errors import BatchConflictError
from tidemark.storage import Location, create_only, delete, read_json, replace_atomically
from tidemark.watermarks import PartitionWatermark, ReadyTime

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 20


@dataclass(frozen=True)
class PartitionRange:
    """Offsets [start, end) of one MQ partition; ``gap`` records offsets lost to retention."""

    partition: int
    start: int
    end: int
    gap_from: int | None = None
    gap_to: int | None = None

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class Plan:
    """What a batch will read, fixed before reading. ``processing_time`` is decided once here
    so a retry judges future event times exactly as the first attempt did."""

    table: str
    batch_id: int
    run_id: str
    topic: str
    processing_time: str
    ranges: tuple[PartitionRange, ...]
    # Records with an event time before this instant belong to sealed hours: they are late.
    # Decided at planning time so a retry classifies exactly as the first attempt did.
    sealed_through: str | None = None

    @property
    def records_planned(self) -> int:
        return sum(r.size for r in self.ranges)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        ranges = tuple(PartitionRange(**r) for r in data.pop("ranges"))
        return cls(ranges=ranges, **data)

    def describe(self) -> str:
        parts = ", ".join(f"{self.topic}[{r.partition}] {r.start}..{r.end}" for r in self.ranges)
        return f"batch {self.batch_id} (run {self.run_id}): {parts or 'no partitions'}"


@dataclass(frozen=True)
class PartitionStats:
    """What one MQ partition contributed to a batch."""

    partition: int
    read: int
    rows: int
    dirty: int
    late: int = 0
    min_event_time: str | None = None
    max_event_time: str | None = None


@dataclass(frozen=True)
class Commit:
    """The commit record: binds run id, offsets, files and counts of a batch."""

    table: str
    batch_id: int
    run_id: str
    committed_by_run: str
    topic: str
    processing_time: str
    ranges: tuple[PartitionRange, ...]
    files: tuple[str, ...]
    rows_per_partition: dict[str, int]
    partitions: tuple[PartitionStats, ...]
    dirty: int
    rows: int
    late: int = 0
    late_per_partition: dict[str, int] = field(default_factory=dict)
    watermarks: tuple[PartitionWatermark, ...] = ()
    ready: ReadyTime | None = None
    # values of data-derived partition columns this batch admitted, per hour (cardinality.py)
    partition_values: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Commit:
        data = dict(data)
        data["ranges"] = tuple(PartitionRange(**r) for r in data["ranges"])
        data["partitions"] = tuple(PartitionStats(**p) for p in data["partitions"])
        data["files"] = tuple(data["files"])
        data["watermarks"] = tuple(PartitionWatermark(**w) for w in data.get("watermarks", ()))
        data["ready"] = ReadyTime.from_json(data["ready"]) if data.get("ready") else None
        return cls(**data)

    @property
    def end_offsets(self) -> dict[int, int]:
        return {r.partition: r.end for r in self.ranges}


@dataclass
class LogState:
    """Summary of everything committed: next offsets, watermarks and running totals."""

    last_committed: int = -1
    end_offsets: dict[int, int] = field(default_factory=dict)
    rows: int = 0
    dirty: int = 0
    late: int = 0
    batches: int = 0
    rows_per_hour: dict[str, int] = field(default_factory=dict)
    late_per_hour: dict[str, int] = field(default_factory=dict)
    watermarks: dict[int, PartitionWatermark] = field(default_factory=dict)
    ready: ReadyTime | None = None
    partition_values: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def apply(self, commit: Commit) -> None:
        self.last_committed = commit.batch_id
        self.end_offsets.update(commit.end_offsets)
        self.rows += commit.rows
        self.dirty += commit.dirty
        self.late += commit.late
        self.batches += 1
        for hour, n in commit.rows_per_partition.items():
            self.rows_per_hour[hour] = self.rows_per_hour.get(hour, 0) + n
        for hour, n in commit.late_per_partition.items():
            self.late_per_hour[hour] = self.late_per_hour.get(hour, 0) + n
        if commit.watermarks:
            self.watermarks = {w.partition: w for w in commit.watermarks}
        if commit.ready is not None:
            self.ready = commit.ready
        if commit.partition_values:
            self.partition_values = merge(self.partition_values, commit.partition_values)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["watermarks"] = [asdict(w) for w in self.watermarks.values()]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogState:
        data = dict(data)
        data["end_offsets"] = {int(k): int(v) for k, v in data["end_offsets"].items()}
        data["watermarks"] = {w["partition"]: PartitionWatermark(**w) for w in data.get("watermarks", [])}
        data["ready"] = ReadyTime.from_json(data["ready"]) if data.get("ready") else None
        return cls(**data)


def _name(batch_id: int) -> str:
    return f"{batch_id:010d}.json"


def run_key(run_id: str) -> str:
    """A filesystem-safe, collision-free key for an Airflow run id (which holds ':' and '+')."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:80]
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:12]
    return f"{readable}-{digest}"


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

    # -- reading -------------------------------------------------------------------------
    def plan(self, batch_id: int) -> Plan | None:
        data = read_json(self.plans / _name(batch_id))
        return Plan.from_json(data) if data else None

    def commit(self, batch_id: int) -> Commit | None:
        data = read_json(self.commits / _name(batch_id))
        return Commit.from_json(data) if data else None

    def batch_of_run(self, run_id: str) -> int | None:
        data = read_json(self.runs / f"{run_key(run_id)}.json")
        return int(data["batch_id"]) if data else None

    def _checkpoint(self) -> LogState:
        data = read_json(self.checkpoint_file)
        return LogState.from_json(data) if data else LogState()

    def state(self) -> LogState:
        """Checkpoint + the commits after it, probed by name."""
        state = self._checkpoint()
        batch = state.last_committed + 1
        while (commit := self.commit(batch)) is not None:
            state.apply(commit)
            batch += 1
        return state

    def iter_commits(self, since: int = 0) -> Iterator[Commit]:
        batch = since
        while (commit := self.commit(batch)) is not None:
            yield commit
            batch += 1

    def pending_plan(self, state: LogState) -> Plan | None:
        """The plan of the first uncommitted batch, if one was persisted."""
        return self.plan(state.last_committed + 1)

    # -- writing -------------------------------------------------------------------------
    def write_plan(self, plan: Plan) -> None:
        if not create_only(self.plans / _name(plan.batch_id), plan.to_json()):
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
        if not create_only(self.commits / _name(commit.batch_id), commit.to_json()):
            raise BatchConflictError(
                f"{self.table}: batch {commit.batch_id} was committed by another process first; "
                "this attempt's files were not published"
            )
        if (commit.batch_id + 1) % CHECKPOINT_EVERY == 0:
            self.write_checkpoint()

    def write_checkpoint(self) -> LogState:
        """Compact the committed state into checkpoint.json (atomic replace)."""
        state = self.state()
        replace_atomically(self.checkpoint_file, state.to_json())
        log.info("%s: commit log checkpoint at batch %s", self.table, state.last_committed)
        return state


@dataclass(frozen=True)
class LockOwner:
    host: str
    pid: int
    run_id: str


class TableLock:
    """A create-only lock file serialising batches of one table across processes.

    A lock left by a dead process on this host is broken automatically; one held by a live
    process makes the second writer fail cleanly with the holder's identity.
    """

    def __init__(self, state_dir: Location | Path, table: str, name: str = "batch") -> None:
        self.table = table
        self.name = name
        self.path = Location(state_dir) / table / f"{name}.lock"

    def _owner(self) -> LockOwner | None:
        data = read_json(self.path)
        return LockOwner(**data) if data else None

    @contextmanager
    def hold(self, run_id: str) -> Iterator[None]:
        me = LockOwner(socket.gethostname(), os.getpid(), run_id)
        if not create_only(self.path, asdict(me)):
            owner = self._owner()
            if owner and owner.host == me.host and not _pid_alive(owner.pid):
                log.warning(
                    "%s: breaking stale %s lock of dead pid %s (run %s)",
                    self.table,
                    self.name,
                    owner.pid,
                    owner.run_id,
                )
                delete(self.path)
                if not create_only(self.path, asdict(me)):
                    raise BatchConflictError(f"{self.table}: lost the race for the {self.name} lock")
            else:
                raise BatchConflictError(
                    f"{self.table}: another job holds the {self.name} lock (host "
                    f"{owner.host if owner else '?'}, pid {owner.pid if owner else '?'}, run "
                    f"{owner.run_id if owner else '?'}); this attempt did nothing and can be retried"
                )
        try:
            yield
        finally:
            if self._owner() == me:
                delete(self.path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
