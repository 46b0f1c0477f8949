"""Decisions that move a table's committed ends or close a batch without reading it: ``rebase``
(the topic's offsets started over, or the table is bound to another topic), ``accept-loss``
(retention deleted offsets before a batch read them) and the commit record of a closed batch.
``resolve`` records the decision and calls these under the table's lock (see its module doc).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tidemark.config import TableConfig
from tidemark.errors import ResolveError
from tidemark.ingest.publishers import publisher
from tidemark.state.audit import AuditLog, AuditRecord
from tidemark.state.batches import Commit, MqPartitionStats, MqRange, Plan
from tidemark.state.commitlog import CommitLog, LogState
from tidemark.state.locks import Lease
from tidemark.table import Table

log = logging.getLogger(__name__)

Broker = dict[int, tuple[int, int]]  # MQ partition -> the broker's (earliest, latest)


@dataclass(frozen=True)
class Decision:
    """Who decided what, when and why (``run_id``: the Airflow run that made it, if any)."""

    action: str
    reason: str
    by: str
    at: datetime
    run_id: str | None = None

    def record(self, audit: AuditLog, batch_id: int, offsets: str, detail: dict[str, Any]) -> AuditRecord:
        """The decision's audit record."""
        return audit.append(
            action=self.action,
            reason=self.reason,
            by=self.by,
            at=self.at.isoformat(),
            batch_id=batch_id,
            offsets=offsets,
            detail={**detail, **({"run_id": self.run_id} if self.run_id else {})},
        )


def lost_offsets(plan: Plan, broker: Broker) -> dict[int, tuple[int, int]]:
    """MQ partition -> (first missing, first available) of each planned range retention
    reached into."""
    return {
        r.mq_partition: (r.start, broker[r.mq_partition][0])
        for r in plan.ranges
        if r.size and r.mq_partition in broker and r.start < broker[r.mq_partition][0]
    }


def describe_lost(config: TableConfig, lost: dict[int, tuple[int, int]]) -> str:
    return ", ".join(
        f"{config.source.topic}[{p}] {first}..{available - 1}"
        for p, (first, available) in sorted(lost.items())
    )


def close_unreadable(
    table: Table, lease: Lease, pending: Plan, broker: Broker, *, decision: Decision, identity: str | None
) -> AuditRecord:
    """A pending batch whose offsets can no longer be read as planned, closed by the decision
    its error named. ``accept-loss``: retention reached into it; the deleted offsets are
    recorded as lost and its partitions move to the first available offset (the others stay:
    the next plan reads them). ``rebase``: its offsets belong to another topic or an earlier
    incarnation of this one (or the topic was truncated); all of them are recorded as lost,
    then the table restarts on the topic as it is now."""
    config, commit_log = table.config, table.state.commit_log
    lost = lost_offsets(pending, broker)
    if decision.action == "accept-loss" and not lost:
        raise ResolveError(
            f"{config.table}: {pending.describe()} is pending and none of its offsets was lost to "
            "retention; resolve it with replan or skip"
        )
    if decision.action == "rebase" and not _started_over(config, pending, broker, identity):
        raise ResolveError(
            f"{config.table}: {pending.describe()} is pending and its offsets are still on the broker; "
            "resolve it first (replan or skip)"
        )
    offsets = (
        f"{describe_lost(config, lost)} lost to retention inside batch {pending.batch_id}"
        if decision.action == "accept-loss"
        else f"{pending.describe()}: never read, its topic's offsets started over"
    )
    record = decision.record(table.state.audit, pending.batch_id, offsets, {"closed_batch": pending.batch_id})
    publisher(table.layout, pending.batch_id, lease.token).rollback()
    if decision.action == "accept-loss":
        moved = {p: available for p, (_, available) in lost.items()}
        ranges = tuple(
            MqRange(
                r.mq_partition, moved[r.mq_partition], moved[r.mq_partition], r.start, moved[r.mq_partition]
            )
            if r.mq_partition in moved
            else MqRange(r.mq_partition, r.start, r.start)
            for r in pending.ranges
        )
        close_batch(commit_log, pending, record, ranges)
        log.warning("%s: %s", config.table, record.describe())
        return record
    close_batch(commit_log, pending, record, closed_ranges(pending, gap=True))
    return rebase(
        config,
        commit_log,
        table.state.audit,
        commit_log.state(),
        broker,
        decision=decision,
        identity=identity,
        record=record,
    )


def _started_over(config: TableConfig, pending: Plan, broker: Broker, identity: str | None) -> bool:
    """Whether ``pending``'s offsets name other records now: another topic, another
    incarnation of it, or a partition gone or truncated below the plan's end."""
    if pending.topic != config.source.topic or (
        identity and pending.topic_id and identity != pending.topic_id
    ):
        return True
    return any(
        r.size and (r.mq_partition not in broker or broker[r.mq_partition][1] < r.end) for r in pending.ranges
    )


def closed_ranges(plan: Plan, *, gap: bool) -> tuple[MqRange, ...]:
    """A closed batch reads nothing: ``replan`` leaves each end where it started, ``skip`` moves
    it past the plan's range and records the range as a gap."""
    if not gap:
        return tuple(MqRange(r.mq_partition, r.start, r.start) for r in plan.ranges)
    return tuple(
        MqRange(r.mq_partition, r.end, r.end, r.start, r.end)
        if r.size
        else MqRange(r.mq_partition, r.start, r.start)
        for r in plan.ranges
    )


def close_batch(
    commit_log: CommitLog,
    plan: Plan,
    record: AuditRecord,
    ranges: tuple[MqRange, ...],
    extra: dict[str, Any] | None = None,
) -> None:
    """A commit record that reads and writes nothing for ``plan``'s batch."""
    commit_log.write_commit(
        Commit(
            table=plan.table,
            batch_id=plan.batch_id,
            run_id=plan.run_id,
            committed_by_run=f"resolve:{record.action}#{record.seq}",
            topic=plan.topic,
            processing_time=plan.processing_time,
            ranges=ranges,
            files=(),
            rows_per_hour={},
            mq_partitions=tuple(MqPartitionStats(r.mq_partition, 0, 0, 0) for r in ranges),
            dirty=0,
            rows=0,
            extra={
                "resolution": record.to_json(),
                **({"topic_id": plan.topic_id} if plan.topic_id else {}),  # the topic it was planned on
                **(extra or {}),
            },
        )
    )


def accept_loss(
    config: TableConfig,
    commit_log: CommitLog,
    audit: AuditLog,
    state: LogState,
    broker: Broker,
    *,
    decision: Decision,
) -> AuditRecord:
    """Move every MQ partition whose committed end retention deleted to the broker's earliest,
    the lost offsets recorded as the closing batch's gap."""
    lost = {p: broker[p][0] for p, end in state.end_offsets.items() if p in broker and end < broker[p][0]}
    if not lost:
        raise ResolveError(f"{config.table}: no committed offset was lost to retention; nothing to accept")
    offsets = ", ".join(f"[{p}] {state.end_offsets[p]}..{first - 1}" for p, first in sorted(lost.items()))
    record = decision.record(
        audit,
        state.last_committed + 1,
        f"{config.source.topic} {offsets} lost to retention",
        {"lost": {str(p): [state.end_offsets[p], first] for p, first in lost.items()}},
    )
    ranges = tuple(MqRange(p, first, first, state.end_offsets[p], first) for p, first in sorted(lost.items()))
    return move_ends(config, commit_log, state, record, ranges, at=decision.at)


def rebase(
    config: TableConfig,
    commit_log: CommitLog,
    audit: AuditLog,
    state: LogState,
    broker: Broker,
    *,
    decision: Decision,
    identity: str | None = None,
    record: AuditRecord | None = None,
) -> AuditRecord:
    """Go on from the broker's offsets: MQ partitions it no longer has are dropped; those
    whose committed end is beyond its latest restart at its earliest, and all of them when the
    topic is another one (the config names another topic, or the same name has another id).
    ``record``: the decision's audit record, when it closed a pending batch first."""
    dropped = sorted(p for p in state.end_offsets if p not in broker)
    renamed = bool(state.topic and state.topic != config.source.topic)
    recreated = renamed or bool(identity and state.topic_id and identity != state.topic_id)
    restarted = {
        p: broker[p][0]
        for p, end in state.end_offsets.items()
        if p in broker and (recreated or end > broker[p][1])
    }
    if renamed:  # the new topic's partitions the old one lacked start at their earliest too
        restarted.update({p: earliest for p, (earliest, _) in broker.items() if p not in restarted})
    if not dropped and not restarted:
        raise ResolveError(
            f"{config.table}: every committed offset is still on the broker; nothing to rebase"
        )
    moves = [f"[{p}] {state.end_offsets.get(p, '-')} -> {start}" for p, start in sorted(restarted.items())]
    offsets = ", ".join(moves + [f"[{p}] dropped" for p in dropped])
    if record is None:
        bound = f" (bound to it from {state.topic})" if renamed else ""
        detail = {
            "restarted": restarted,
            "dropped": dropped,
            **({"topic_id": identity} if recreated and identity else {}),
            **({"topic": config.source.topic, "from_topic": state.topic} if renamed else {}),
        }
        record = decision.record(
            audit, state.last_committed + 1, f"{config.source.topic}{bound} {offsets}", detail
        )
    ranges = tuple(MqRange(p, start, start) for p, start in sorted(restarted.items()))
    extra = {"dropped_mq_partitions": dropped, **({"topic_id": identity} if identity else {})}
    return move_ends(config, commit_log, state, record, ranges, at=decision.at, extra=extra)


def move_ends(
    config: TableConfig,
    commit_log: CommitLog,
    state: LogState,
    record: AuditRecord,
    ranges: tuple[MqRange, ...],
    *,
    at: datetime,
    extra: dict[str, Any] | None = None,
) -> AuditRecord:
    """A decision that moves committed ends without a pending batch (rebase, accept-loss): a
    plan of its own, closed at once, reading nothing."""
    plan = Plan(
        config.table,
        state.last_committed + 1,
        f"resolve:{record.action}#{record.seq}",
        config.source.topic,
        at.isoformat(),
        ranges,
    )
    commit_log.write_plan(plan)
    close_batch(commit_log, plan, record, ranges, extra)
    log.warning("%s: %s", config.table, record.describe())
    return record
