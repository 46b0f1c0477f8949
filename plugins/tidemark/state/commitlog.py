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

from tidemark.errors import BatchConflictError
from tidemark.faults import crash_point
from tidemark.state.batches import Commit, Plan
from tidemark.state.layout import run_key
from tidemark.state.partition_values import merge
from tidemark.state.seqlog import SequentialLog
from tidemark.state.storage import Location, create_only, read_json
from tidemark.time.watermarks import MqWatermark, ReadyTime

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 20


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
    topic: str | None = None  # the topic of the last commit: the table's binding (ingest.identity)
    # MQ partition -> the last batch that restarted its offsets (a rebase): offsets read before
    # it belong to an earlier incarnation of the topic, and can never be read again
    restarted_at: dict[int, int] = field(default_factory=dict)
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
        if (
            commit.topic and commit.topic != self.topic and "replay" not in commit.extra
        ):  # replays read no topic
            if self.topic is not None and not commit.extra.get("topic_id"):
                self.topic_id = None  # bound to another topic: the old one's id means nothing
            self.topic = commit.topic
        if commit.committed_by_run.startswith("resolve:rebase"):
            for moved in [r.mq_partition for r in commit.ranges] + list(
                commit.extra.get("dropped_mq_partitions", ())
            ):
                self.restarted_at[int(moved)] = commit.batch_id
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
        data["restarted_at"] = {int(k): int(v) for k, v in data.get("restarted_at", {}).items()}
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

    def bound_topic(self, state: LogState | None = None) -> str | None:
        """The topic the table is bound to: its last commit's, else its pending first plan's
        (None: it never planned). A checkpoint of a release before the binding lacks the
        name: the last commit record has it."""
        state = state or self.state()
        if state.last_committed >= 0:
            if state.topic:
                return state.topic
            last = self.commit(state.last_committed)
            if last is not None and last.topic:
                return last.topic
        pending = self.pending_plan(state)
        return pending.topic if pending is not None else None

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


def bound_topic_of(state_dir: Location | Path, table: str) -> str | None:
    """The topic ``table`` is bound to (``CommitLog.bound_topic``), for the config loaders
    below the table handle: which of two families' topics holds a table name."""
    return CommitLog(state_dir, table).bound_topic()


class CommittedFiles(dict[int, frozenset[str]]):
    """The files each batch's commit record lists, read from the commit log when first asked."""

    def __init__(self, commit_log: CommitLog) -> None:
        super().__init__()
        self.commit_log = commit_log

    def __missing__(self, batch_id: int) -> frozenset[str]:
        commit = self.commit_log.commit(batch_id)
        self[batch_id] = found = frozenset(commit.files if commit else ())
        return found
