"""One door to a table's state: the logs and records of one table in a state store, each
opened once per handle. A job that serves several tables (a group's dump or seal) holds one
handle per table, so each keeps its own commit log, lease and exactly-once guarantees.

Every record keeps its own module and protocol (``state/``: ``commitlog``, ``journal``,
``locks``, ``mode``, ``audit``; the schema history in ``tidemark.evolution``); this only names
them in one place. It lives beside ``state/``, not in it, because the schema history's
records are table configs (``state/`` imports nothing above it: the import-linter contract
in pyproject.toml).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from tidemark.evolution import SchemaHistory
from tidemark.state.audit import AuditLog
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.locks import TableLock
from tidemark.state.mode import TableWriter
from tidemark.state.storage import Location


@dataclass(frozen=True)
class TableState:
    """The state of ``table`` under ``state_dir`` (a local path or an object-store URI)."""

    state_dir: Location | Path
    table: str

    @cached_property
    def commit_log(self) -> CommitLog:
        """Plans and commits of the table's batches (the source of truth of what was read)."""
        return CommitLog(self.state_dir, self.table)

    @cached_property
    def journal(self) -> HourJournal:
        """What happened to each hour: sealed, quarantined, amended, rebuilt."""
        return HourJournal(self.state_dir, self.table)

    @cached_property
    def audit(self) -> AuditLog:
        """The operators' decisions."""
        return AuditLog(self.state_dir, self.table)

    @cached_property
    def writer(self) -> TableWriter:
        """Which writer (the batch DAG or the stream) may commit batches."""
        return TableWriter(self.state_dir, self.table)

    @cached_property
    def schema_history(self) -> SchemaHistory:
        """The table's recorded schema versions."""
        return SchemaHistory(self.state_dir, self.table)

    def lock(self, name: str = "batch") -> TableLock:
        """The table's lock ``name`` (``batch``: the one every committing job holds)."""
        return TableLock(self.state_dir, self.table, name)
