"""The way out of a stuck batch: an operator's recorded decision about the pending plan.

Every run adopts the pending (planned, uncommitted) batch before planning anything new, so a
failure that repeats on the same offsets (the dirty gate, retention past the plan's start, a
poison record that fails a task) stops the table until somebody decides. The decisions:

| action | what happens to the pending batch | when |
|---|---|---|
| ``replan`` | closed with nothing read: the next run plans afresh from the last committed end, with the broker's offsets and its own clock | the plan itself is wrong (stale, retention moved past its start with ``on_data_loss: record_and_continue``) |
| ``skip`` | closed with its offsets recorded as a gap: nothing of them lands | a poison range that must not block the table (replay it later from the broker if needed) |
| ``accept`` | completed by the next run although its dirty records exceed ``max_dirty_ratio`` | the dirty records are understood; they land in ``<table>__dirty`` |
| ``accept-loss`` | (no pending batch) each MQ partition whose next offsets retention deleted moves to the broker's earliest; the lost offsets are recorded as a gap and counted (``lost_to_retention`` in ``tidemark status``) | after ``OffsetsLostToRetentionError`` |
| ``rebase`` | (no pending batch) MQ partitions the broker no longer has are dropped and those whose committed end is beyond the broker's latest restart at its earliest | after ``OffsetsWentBackError``: the topic was recreated or truncated |

Each decision is an audit record (who, when, why, which batch and offsets) in the table's
create-only audit log, shown by ``tidemark status`` and the health page. ``replan``, ``skip``
and ``rebase`` write a commit record that reads nothing (so everything stays exactly once: a
retry of a run bound to the closed batch is a no-op); an earlier attempt's published files
are rolled back first.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from tidemark.config import TableConfig
from tidemark.errors import ResolveError
from tidemark.ingest.kafka import client_properties, partition_offsets, topic_id
from tidemark.ingest.publishers import publisher
from tidemark.settings import Settings
from tidemark.state.audit import AuditLog, AuditRecord
from tidemark.state.batches import Commit, MqPartitionStats, MqRange, Plan
from tidemark.state.commitlog import CommitLog, LogState
from tidemark.state.layout import Layout
from tidemark.table_state import TableState

log = logging.getLogger(__name__)

ACTIONS = ("replan", "skip", "accept", "rebase", "accept-loss")


def resolve(
    config: TableConfig,
    settings: Settings,
    *,
    action: str,
    reason: str,
    by: str,
    at: datetime,
    broker_offsets: dict[int, tuple[int, int]] | None = None,
    run_id: str | None = None,
) -> AuditRecord:
    """Record and apply an operator decision about the table's pending batch (see the module
    doc). ``rebase`` needs the broker's offsets ({partition: (earliest, latest)}): given, or
    read from the table's topic. A decision made by an Airflow run (``run_id``) is applied
    once: its retries find it done."""
    if action not in ACTIONS:
        raise ResolveError(f"{config.table}: unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    if not reason.strip():
        raise ResolveError(f"{config.table}: say why (--reason): the decision is kept in the audit log")
    commit_log = TableState(settings.state_location, config.table).commit_log
    audit = TableState(settings.state_location, config.table).audit
    with TableState(settings.state_location, config.table).lock().hold(f"resolve:{action}") as lease:
        done = next((r for r in audit.records() if run_id and r.detail.get("run_id") == run_id), None)
        if done is not None:
            log.info("%s: run %s already decided: %s", config.table, run_id, done.describe())
            return done
        state = commit_log.state()
        pending = commit_log.pending_plan(state)
        if action in ("rebase", "accept-loss"):
            if pending is not None:
                raise ResolveError(
                    f"{config.table}: {pending.describe()} is pending; resolve it first (replan or skip)"
                )
            identity = None
            if broker_offsets is None:
                conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
                broker_offsets = partition_offsets(conf, config.source.topic)
                identity = topic_id(conf, config.source.topic)
            if action == "rebase":
                return _rebase(
                    config,
                    commit_log,
                    audit,
                    state,
                    broker_offsets,
                    reason=reason,
                    by=by,
                    at=at,
                    run_id=run_id,
                    identity=identity,
                )
            return _accept_loss(
                config, commit_log, audit, state, broker_offsets, reason=reason, by=by, at=at, run_id=run_id
            )
        if pending is None:
            raise ResolveError(
                f"{config.table}: no pending batch (last committed {state.last_committed}); nothing to {action}"
            )
        record = audit.append(
            action=action,
            reason=reason,
            by=by,
            at=at.isoformat(),
            batch_id=pending.batch_id,
            offsets=pending.describe(),
            detail={"run_id": run_id} if run_id else {},
        )
        if action != "accept":
            publisher(Layout(settings, config.table), pending.batch_id, lease.token).rollback()
            _close(commit_log, pending, record, _closed_ranges(pending, gap=action == "skip"))
        log.warning("%s: %s", config.table, record.describe())
        return record


def _closed_ranges(plan: Plan, *, gap: bool) -> tuple[MqRange, ...]:
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


def _close(
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
            extra={"resolution": record.to_json(), **(extra or {})},
        )
    )


def _accept_loss(
    config: TableConfig,
    commit_log: CommitLog,
    audit: AuditLog,
    state: LogState,
    broker: dict[int, tuple[int, int]],
    *,
    reason: str,
    by: str,
    at: datetime,
    run_id: str | None,
) -> AuditRecord:
    """Move every MQ partition whose committed end retention deleted to the broker's earliest,
    the lost offsets recorded as the closing batch's gap."""
    lost = {p: broker[p][0] for p, end in state.end_offsets.items() if p in broker and end < broker[p][0]}
    if not lost:
        raise ResolveError(f"{config.table}: no committed offset was lost to retention; nothing to accept")
    offsets = ", ".join(f"[{p}] {state.end_offsets[p]}..{first - 1}" for p, first in sorted(lost.items()))
    record = audit.append(
        action="accept-loss",
        reason=reason,
        by=by,
        at=at.isoformat(),
        batch_id=state.last_committed + 1,
        offsets=f"{config.source.topic} {offsets} lost to retention",
        detail={
            "lost": {str(p): [state.end_offsets[p], first] for p, first in lost.items()},
            **({"run_id": run_id} if run_id else {}),
        },
    )
    ranges = tuple(MqRange(p, first, first, state.end_offsets[p], first) for p, first in sorted(lost.items()))
    return _move_ends(config, commit_log, state, record, ranges, at=at)


def _rebase(
    config: TableConfig,
    commit_log: CommitLog,
    audit: AuditLog,
    state: LogState,
    broker: dict[int, tuple[int, int]],
    *,
    reason: str,
    by: str,
    at: datetime,
    run_id: str | None,
    identity: str | None = None,
) -> AuditRecord:
    dropped = sorted(p for p in state.end_offsets if p not in broker)
    recreated = bool(identity and state.topic_id and identity != state.topic_id)
    restarted = {
        p: broker[p][0]
        for p, end in state.end_offsets.items()
        if p in broker and (recreated or end > broker[p][1])
    }
    if not dropped and not restarted:
        raise ResolveError(
            f"{config.table}: every committed offset is still on the broker; nothing to rebase"
        )
    moves = [f"[{p}] {state.end_offsets[p]} -> {start}" for p, start in sorted(restarted.items())]
    offsets = ", ".join(moves + [f"[{p}] dropped" for p in dropped])
    record = audit.append(
        action="rebase",
        reason=reason,
        by=by,
        at=at.isoformat(),
        batch_id=state.last_committed + 1,
        offsets=f"{config.source.topic} {offsets}",
        detail={
            "restarted": restarted,
            "dropped": dropped,
            **({"topic_id": identity} if recreated else {}),
            **({"run_id": run_id} if run_id else {}),
        },
    )
    ranges = tuple(MqRange(p, start, start) for p, start in sorted(restarted.items()))
    extra = {"dropped_mq_partitions": dropped, **({"topic_id": identity} if identity else {})}
    return _move_ends(config, commit_log, state, record, ranges, at=at, extra=extra)


def _move_ends(
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
    _close(commit_log, plan, record, ranges, extra)
    log.warning("%s: %s", config.table, record.describe())
    return record
