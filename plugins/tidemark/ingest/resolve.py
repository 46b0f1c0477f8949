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

import argparse
import logging
import re
from collections.abc import Sequence
from datetime import datetime

from tidemark.config import TableConfig
from tidemark.errors import ResolveError
from tidemark.ingest.kafka import client_properties, partition_offsets, topic_id
from tidemark.ingest.publishers import publisher
from tidemark.ingest.rebase import (
    Decision,
    accept_loss,
    close_batch,
    close_unreadable,
    closed_ranges,
    describe_lost,
    lost_offsets,
    rebase,
)
from tidemark.settings import Settings
from tidemark.state.audit import AuditRecord
from tidemark.state.locks import Lease
from tidemark.table import Table

log = logging.getLogger(__name__)

ACTIONS = ("replan", "skip", "accept", "rebase", "accept-loss")


def decision_problems(arguments: Sequence[str]) -> list[str]:
    """The dump's trigger-form decision (``--resolve``, ``--replay-dirty``, ``--resolve-reason``
    among a job's arguments) checked as a whole before any job starts: a decision or a replay
    needs its reason; a replay names ``all`` or batch ids. What the form's own schema cannot
    say (one field depends on another)."""
    parser = argparse.ArgumentParser(add_help=False)
    for name in ("--resolve", "--replay-dirty", "--resolve-reason"):
        parser.add_argument(name, default="")
    given, _ = parser.parse_known_args(list(arguments))
    problems = []
    if given.resolve and given.resolve not in ACTIONS:
        problems.append(f"resolve: {given.resolve!r} is not one of {', '.join(ACTIONS)}")
    if (given.resolve or given.replay_dirty) and not given.resolve_reason.strip():
        what = f"the decision {given.resolve!r}" if given.resolve else f"the replay of {given.replay_dirty!r}"
        problems.append(f"resolve_reason: {what} needs a reason (it is kept in the audit log with your user)")
    if given.replay_dirty and not re.fullmatch(r"all|\d+(,\d+)*", given.replay_dirty.strip()):
        problems.append(f"replay_dirty: {given.replay_dirty!r} is neither 'all' nor batch ids like 3,5")
    return problems


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
    doc), under the table's batch lock. ``rebase``, ``accept-loss`` and ``skip`` compare with
    the broker's offsets ({partition: (earliest, latest)}): given, or read from the table's
    topic. A decision made by an Airflow run (``run_id``) is applied once: its retries find it
    done."""
    if action not in ACTIONS:
        raise ResolveError(f"{config.table}: unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    if not reason.strip():
        raise ResolveError(f"{config.table}: say why (--reason): the decision is kept in the audit log")
    table = Table.open(config, settings)
    with table.state.lock().hold(f"resolve:{action}") as lease:
        return decide(
            table,
            lease,
            action=action,
            reason=reason,
            by=by,
            at=at,
            broker_offsets=broker_offsets,
            run_id=run_id,
        )


def decide(
    table: Table,
    lease: Lease,
    *,
    action: str,
    reason: str,
    by: str,
    at: datetime,
    broker_offsets: dict[int, tuple[int, int]] | None = None,
    run_id: str | None = None,
) -> AuditRecord:
    """``resolve`` under a lock its caller holds (a dump deciding ``accept-loss`` by itself
    under ``on_data_loss: record_and_continue`` holds the batch lock already)."""
    config, settings = table.config, table.settings
    commit_log, audit = table.state.commit_log, table.state.audit
    decision = Decision(action, reason, by, at, run_id)
    done = next((r for r in audit.records() if run_id and r.detail.get("run_id") == run_id), None)
    if done is not None:
        log.info("%s: run %s already decided: %s", config.table, run_id, done.describe())
        return done
    state = commit_log.state()
    pending = commit_log.pending_plan(state)
    identity = None
    if action in ("rebase", "accept-loss", "skip") and broker_offsets is None and not config.source.retired:
        conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
        broker_offsets = partition_offsets(conf, config.source.topic)
        identity = topic_id(conf, config.source.topic)
    broker = broker_offsets or {}
    if action in ("rebase", "accept-loss") and pending is not None:
        return close_unreadable(table, lease, pending, broker, decision=decision, identity=identity)
    if action == "rebase":
        return rebase(config, commit_log, audit, state, broker, decision=decision, identity=identity)
    if action == "accept-loss":
        return accept_loss(config, commit_log, audit, state, broker, decision=decision)
    if pending is None:
        raise ResolveError(
            f"{config.table}: no pending batch (last committed {state.last_committed}); nothing to {action}"
        )
    if action == "skip" and (lost := lost_offsets(pending, broker)):
        raise ResolveError(
            f"{config.table}: retention deleted offsets {describe_lost(config, lost)} of the pending batch "
            f"{pending.batch_id}; skip would drop its offsets that are still readable too. Record exactly the "
            f"deleted ones with tidemark resolve --table {config.table} --action accept-loss --reason '...'"
        )
    record = decision.record(audit, pending.batch_id, pending.describe(), {})
    if action != "accept":
        publisher(table.layout, pending.batch_id, lease.token).rollback()
        close_batch(commit_log, pending, record, closed_ranges(pending, gap=action == "skip"))
    log.warning("%s: %s", config.table, record.describe())
    return record
