"""Decisions a person approves in Airflow: what a way out of a stopped table would do, said
before it is done, and the same decision applied with the approver named in the audit log.

The decide DAG (``airflow/decide.py``) calls :func:`propose` (the approver reads its text; a
decision that cannot apply fails there, before anyone is asked), then waits for a person's
approval (Airflow's human-in-the-loop ``ApprovalOperator``), then calls :func:`apply_decision`
with the approving user. The CLI (``tidemark resolve``, ``tidemark unlock``) applies the same
decisions for scripts.
"""

from __future__ import annotations

import logging
from datetime import datetime

from tidemark.config import TableConfig
from tidemark.errors import ResolveError
from tidemark.ingest.rebase import Decision
from tidemark.ingest.resolve import ACTIONS, resolve
from tidemark.settings import Settings
from tidemark.state.audit import AuditRecord
from tidemark.table import Table

log = logging.getLogger(__name__)

UNLOCK = "unlock"
APPROVABLE = (*ACTIONS, UNLOCK)
# what each decision does, for the approver (resolve.py's module doc, one line each)
MEANING = {
    "replan": "closes the pending batch with nothing read; the next run plans afresh from the last committed end",
    "skip": "closes the pending batch with its offsets recorded as a gap: nothing of them lands",
    "accept": "lets the next run commit the pending batch although its dirty records exceed max_dirty_ratio",
    "rebase": "binds the table to the topic the broker has now: MQ partitions it no longer has are "
    "dropped, those beyond its latest offset restart at its earliest",
    "accept-loss": "records the offsets retention deleted as lost and moves on from the broker's earliest",
    UNLOCK: "frees the table's batch lock, left by a host or process that is gone",
}


def propose(config: TableConfig, settings: Settings, action: str) -> str:
    """What approving ``action`` on ``config``'s table would do, in Markdown for the approver;
    a ResolveError naming why when it cannot apply (nothing pending, the lock free)."""
    if action not in APPROVABLE:
        raise ResolveError(
            f"{config.table}: unknown decision {action!r}; expected one of {', '.join(APPROVABLE)}"
        )
    state = Table.read(config, settings).state
    lines = [f"**{action}** on `{config.table}` {MEANING[action]}."]
    if action == UNLOCK:
        holder = state.lock().holder()
        if holder is None:
            raise ResolveError(f"{config.table}: the batch lock is free; nothing to unlock")
        gone = " (its process is gone)" if holder["process_gone"] else ""
        expired = " (its lease expired)" if holder["expired"] else ""
        lines.append(f"The lock is held by {holder['holder']} since {holder['since']}{gone}{expired}.")
        return "\n\n".join(lines)
    commit_log = state.commit_log
    log_state = commit_log.state()
    pending = commit_log.pending_plan(log_state)
    if pending is None and action in ("replan", "skip", "accept"):
        raise ResolveError(
            f"{config.table}: no pending batch (last committed {log_state.last_committed}); nothing to {action}"
        )
    lines.append(
        f"Pending batch: {pending.describe()}."
        if pending
        else f"No pending batch; last committed {log_state.last_committed}."
    )
    lines.append(
        f"Topic `{config.source.topic}`; the decision is kept in the audit log with your user and reason."
    )
    return "\n\n".join(lines)


def apply_decision(config: TableConfig, settings: Settings, decision: Decision) -> AuditRecord | None:
    """Apply an approved decision as its ``by``: ``resolve`` for a batch decision (once per
    ``run_id``), :func:`unlock` for the lock; None when the lock was already free."""
    d = decision
    if d.action == UNLOCK:
        return unlock(config, settings, reason=d.reason, by=d.by, at=d.at)
    return resolve(config, settings, action=d.action, reason=d.reason, by=d.by, at=d.at, run_id=d.run_id)


def unlock(
    config: TableConfig, settings: Settings, *, reason: str, by: str, at: datetime, lock: str = "batch"
) -> AuditRecord | None:
    """Free a table lock whoever holds it (a lost host's), with an audit record; None when free."""
    if not reason.strip():
        raise ResolveError(f"{config.table}: say why (--reason): the decision is kept in the audit log")
    state = Table.read(config, settings).state
    released = state.lock(lock).release_by_operator(by)
    if released is None:
        log.info("%s: the %s lock is free; nothing to do", config.table, lock)
        return None
    token, holder = released
    record = state.audit.append(
        action=UNLOCK,
        reason=reason,
        by=by,
        at=at.isoformat(),
        batch_id=None,
        offsets=f"{lock} lock token {token} of {holder.describe()}",
    )
    log.warning("%s: %s", config.table, record.describe())
    return record
