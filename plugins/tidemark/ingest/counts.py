"""The counts of a staged batch and their reconciliation: the typed contract between the read
tasks (or the Spark path) that count what they staged and the driver that commits.

Three independent sides must agree before a batch commits:

- the read receipts (records read per sub-range, written by the reader);
- the staged counts (:class:`StagedCount`: rows, late rows and dirty records per MQ
  partition, hour and reason): read == rows + dirty + late per MQ partition;
- the row counts in the staged files' own Parquet footers.

A mismatch raises ``ReconciliationError`` naming the table, batch, run and offsets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidemark.config.columns import TOMBSTONE
from tidemark.errors import ReconciliationError
from tidemark.state.batches import MqPartitionStats, Plan
from tidemark.time.hours import hour_path
from tidemark.time.instants import iso


@dataclass(frozen=True)
class StagedCount:
    """Records of one MQ partition with one verdict: good rows (on time or late) of one hour,
    or dirty records of one reason; with the event-time range of good rows."""

    mq_partition: int
    dt: str | None
    hr: str | None
    late: bool
    reason: str | None
    n: int
    min_ts: datetime | None = None
    max_ts: datetime | None = None

    @property
    def kind(self) -> str:
        """``dirty``, ``late`` or ``rows``: which files hold these records."""
        return "dirty" if self.reason is not None else "late" if self.late else "rows"


@dataclass
class MqPartitionTally:
    """What the staged counts say one MQ partition contributed."""

    rows: int = 0
    dirty: int = 0
    late: int = 0
    tombstones: int = 0  # in the dirty files, but never dirty
    min_ts: datetime | None = None
    max_ts: datetime | None = None

    def add(self, count: StagedCount) -> None:
        kind = "tombstones" if count.reason == TOMBSTONE else count.kind
        setattr(self, kind, getattr(self, kind) + count.n)
        if count.reason is None and count.min_ts is not None and count.max_ts is not None:
            self.min_ts = count.min_ts if self.min_ts is None else min(self.min_ts, count.min_ts)
            self.max_ts = count.max_ts if self.max_ts is None else max(self.max_ts, count.max_ts)


@dataclass
class FoldedCounts:
    """Staged counts per MQ partition, per hour (on-time and late rows) and per dirty reason."""

    per_mq_partition: dict[int, MqPartitionTally] = field(default_factory=dict)
    rows_per_hour: dict[str, int] = field(default_factory=dict)
    late_per_hour: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)


def fold_stats(counts: Iterable[StagedCount]) -> FoldedCounts:
    """Fold the tasks' counts (any order, any split across tasks) into per-partition,
    per-hour and per-reason totals."""
    folded = FoldedCounts()
    for count in counts:
        folded.per_mq_partition.setdefault(count.mq_partition, MqPartitionTally()).add(count)
        if count.reason is not None:
            folded.reasons[count.reason] = folded.reasons.get(count.reason, 0) + count.n
            continue
        assert count.dt is not None and count.hr is not None
        per_hour = folded.late_per_hour if count.late else folded.rows_per_hour
        hour = hour_path(count.dt, count.hr)
        per_hour[hour] = per_hour.get(hour, 0) + count.n
    return folded


def reconcile(
    plan: Plan, receipts: list[dict[str, Any]], per_mq_partition: dict[int, MqPartitionTally]
) -> list[MqPartitionStats]:
    """read == rows + dirty + late per MQ partition, and every planned sub-range has a receipt."""
    # the dump's own: the reader subclasses pyspark's data source classes (~0.13 s to import),
    # which a seal that imports this module for its publishers never needs
    from tidemark.ingest.reader import DEFAULT_SUBRANGE, split_ranges

    expected = {
        (s.mq_partition, s.start, s.end)
        for s in split_ranges([r.__dict__ for r in plan.ranges], DEFAULT_SUBRANGE)
    }
    seen = {(r["mq_partition"], r["start"], r["end"]) for r in receipts}
    problems = [f"{plan.topic}[{p}] {s}..{e - 1}: no read receipt" for p, s, e in sorted(expected - seen)]
    reads = {
        r.mq_partition: sum(x["read"] for x in receipts if x["mq_partition"] == r.mq_partition)
        for r in plan.ranges
    }
    return reconcile_reads(plan, reads, per_mq_partition, where=planned_offsets(plan), problems=problems)


def planned_offsets(plan: Plan) -> dict[int, str]:
    """Each MQ partition's planned offsets, as messages name them (``offsets 0..99``)."""
    return {r.mq_partition: f"offsets {r.start}..{r.end - 1}" for r in plan.ranges}


def reconcile_reads(
    plan: Plan,
    reads: dict[int, int],
    per_mq_partition: dict[int, MqPartitionTally],
    *,
    where: dict[int, str] | None = None,
    problems: list[str] | None = None,
) -> list[MqPartitionStats]:
    """read == rows + dirty + late (+ tombstones) for each MQ partition of ``reads`` (records
    read per MQ partition, counted apart from the staged counts); the stats to commit."""
    problems = list(problems or [])
    stats = []
    for mq_partition, read in sorted(reads.items()):
        got = per_mq_partition.get(mq_partition, MqPartitionTally())
        if read != got.rows + got.dirty + got.late + got.tombstones:
            problems.append(
                f"{plan.topic}[{mq_partition}] {(where or {}).get(mq_partition, 'records')}: "
                f"read {read} != rows {got.rows} + dirty {got.dirty} + late {got.late}"
                + (f" + tombstones {got.tombstones}" if got.tombstones else "")
            )
        stats.append(
            MqPartitionStats(
                mq_partition=mq_partition,
                read=read,
                rows=got.rows,
                dirty=got.dirty,
                late=got.late,
                tombstones=got.tombstones,
                min_event_time=iso(got.min_ts),
                max_event_time=iso(got.max_ts),
            )
        )
    unread = sorted(set(per_mq_partition) - set(reads))
    if unread:
        problems.append(f"staged records of MQ partitions {unread} that nothing read")
    if problems:
        raise ReconciliationError(
            f"{plan.table} batch {plan.batch_id} (run {plan.run_id}) not committed: " + "; ".join(problems)
        )
    return stats


def check_files(plan: Plan, in_files: dict[str, int], stats: list[MqPartitionStats]) -> None:
    """The staged files' footers hold exactly the rows, late rows and dirty records counted."""
    counted = {
        "rows": sum(s.rows for s in stats),
        "late": sum(s.late for s in stats),
        "dirty": sum(s.dirty + s.tombstones for s in stats),  # tombstones sit in the dirty files
    }
    if in_files != counted:
        raise ReconciliationError(
            f"{plan.table} batch {plan.batch_id} (run {plan.run_id}) not committed: staged files hold "
            f"{in_files} but the tasks counted {counted}; offsets {plan.describe()}"
        )


def progress_lines(
    plan: Plan, stats: list[MqPartitionStats], receipts: list[dict[str, Any]], folded: FoldedCounts
) -> list[str]:
    """The task log's progress of a staged batch: a line per MQ partition (its offsets, records
    read, rows staged, dirty, late, and the seconds its read tasks took) and a line per hour."""
    seconds: dict[int, float] = {}
    for receipt in receipts:
        if receipt.get("seconds") is not None:
            partition = receipt["mq_partition"]
            seconds[partition] = seconds.get(partition, 0.0) + receipt["seconds"]
    where = planned_offsets(plan)
    lines = [
        f"batch {plan.batch_id} MQ partition {s.mq_partition} ({where.get(s.mq_partition, 'no offsets')}): "
        f"read {s.read}, rows staged {s.rows}, dirty {s.dirty}, late {s.late}, tombstones {s.tombstones}"
        + (f", {seconds[s.mq_partition]:.1f} s in its read tasks" if s.mq_partition in seconds else "")
        for s in stats
    ]
    for hour in sorted({*folded.rows_per_hour, *folded.late_per_hour}):
        late = folded.late_per_hour.get(hour, 0)
        lines.append(
            f"batch {plan.batch_id} hour {hour}: rows staged {folded.rows_per_hour.get(hour, 0)}"
            + (f", late {late}" if late else "")
        )
    return lines
