"""Which writer reads a table's topic: the batch DAG's dump or the continuous stream.

Both run the same commit protocol on the same commit log, so either can take over where the
other stopped; what must never happen is both reading offsets at once (two plans racing for
the next batch id would both be correct, but a table whose batches come from two schedules
is impossible to reason about, and the stream's checkpoint would disagree with the log at
every batch). The mode is one record per table, ``<state>/<table>/writer.json``, changed only
by ``tidemark switch`` (or the stream DAG's trigger form), under the table's batch lock and
with an audit record. Every offset-reading batch checks it under the same lock before it
plans (``WriterModeError``), so at any moment only the mode's writer commits offsets;
replays, resolutions and seals are not offset readers and run in either mode.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tidemark.errors import TidemarkError, WriterModeError
from tidemark.state.audit import AuditLog
from tidemark.state.locks import TableLock
from tidemark.state.storage import Location, read_json, replace_atomically

log = logging.getLogger(__name__)

BATCH = "batch"
STREAM = "stream"
WRITERS = (BATCH, STREAM)


@dataclass(frozen=True)
class WriterMode:
    """The table's writer, since when, decided by whom (``audit_seq``: its audit record)."""

    mode: str = BATCH
    since: str = ""
    by: str = ""
    reason: str = ""
    audit_seq: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        if not self.since:
            return f"{self.mode} (the default: never switched)"
        return f"{self.mode} since {self.since} (switched by {self.by}: {self.reason})"


class TableWriter:
    """The writer-mode record of one table."""

    def __init__(self, state_dir: Location | Path, table: str) -> None:
        self.table = table
        self._record = Location(state_dir) / table / "writer.json"

    def current(self) -> WriterMode:
        data = read_json(self._record)
        return WriterMode(**data) if data else WriterMode()

    def require(self, writer: str) -> None:
        """Raise ``WriterModeError`` unless ``writer`` is the table's writer (call under the
        table's batch lock, before planning)."""
        mode = self.current().mode
        if mode != writer:
            raise WriterModeError(self.table, mode, writer)

    def batch_refusal(self) -> str | None:
        """Why a scheduled batch run reads nothing now (the table is the stream's), or None
        (the ingest DAG's dump skips with it, rather than compete with the stream or fail)."""
        mode = self.current()
        if mode.mode == BATCH:
            return None
        return (
            f"{self.table} is written by the {mode.describe()}; this run reads nothing (hand it back: "
            f"tidemark switch --table {self.table} --to batch, or the stream DAG's trigger form)"
        )

    def switch(self, to: str, *, by: str, reason: str, at: str) -> tuple[WriterMode, bool]:
        """Make ``to`` the table's writer, with an audit record; returns the mode and whether
        it changed (switching to the current writer is a no-op, not an error)."""

        if to not in WRITERS:
            raise TidemarkError(f"{self.table}: unknown writer {to!r}; expected one of {', '.join(WRITERS)}")
        if not reason.strip():
            raise TidemarkError(f"{self.table}: say why (--reason): the switch is kept in the audit log")
        with TableLock(self._record.parent.parent, self.table).hold(f"switch:{to}"):
            current = self.current()
            if current.mode == to:
                return current, False
            record = AuditLog(self._record.parent.parent, self.table).append(
                action=f"switch_to_{to}",
                reason=reason,
                by=by,
                at=at,
                batch_id=None,
                offsets=f"writer {current.mode} -> {to}",
            )
            mode = WriterMode(to, at, by, reason, record.seq)
            replace_atomically(self._record, mode.to_json())
        log.info("%s: the table's writer is now the %s (%s)", self.table, to, record.describe())
        return mode, True
