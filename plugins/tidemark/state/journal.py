"""The hour journal: what sealing did to each hour of a table, in order.

Layout under ``<state dir>/<table>/partitions`` (the directory name predates the word
"journal"; records are never moved)::

    journal/<seq>.json   one entry per step of an hour (create-only, sequential: ``seqlog``)
    checkpoint.json      per-hour latest entry up to some seq (atomically replaced)
    announced.json       the highest seq whose Asset event Airflow is known to hold

Sealing is in hour order, so the decided hours are exactly those before ``sealed_through``;
that single instant is what a dump plan records to decide which records are late.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from tidemark.errors import BatchConflictError
from tidemark.state.seqlog import SequentialLog
from tidemark.state.storage import Location, read_json, replace_atomically

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 50


class EntryKind(StrEnum):
    """The steps of an hour. A string enum: entries store the plain value."""

    SEAL = "seal"  # version 1: compacted, checked, registered
    QUARANTINE = "quarantine"  # version 0: blocked by the quality gate, not registered
    RELEASE = "release"  # version 1: a quarantined hour registered after a person's decision
    AMEND = "amend"  # version > 1: late rows folded in
    REBUILD = "rebuild"  # version + 1: re-read from the broker and swapped in
    COMPACT = "compact"  # version + 1: the same rows, an amended hour's files merged back
    # the table's hours before this entry's hour dropped by retention (``seal/retention.py``):
    # its hour is the first one kept, ``dropped`` names the hours it dropped
    RETENTION = "retention"

    @property
    def published(self) -> bool:
        """The hour is registered and readable in this state."""
        return self not in (EntryKind.QUARANTINE, EntryKind.RETENTION)

    @property
    def quarantined(self) -> bool:
        return self is EntryKind.QUARANTINE

    @property
    def decides(self) -> bool:
        """The step moves the sealed frontier (a quarantined hour is decided, not published)."""
        return self in (EntryKind.SEAL, EntryKind.QUARANTINE)


@dataclass(frozen=True)
class JournalEntry:
    """One step of an hour (see :class:`EntryKind`)."""

    seq: int
    table: str
    hour: str  # the hour key, e.g. 2026-11-22T10
    hour_start: str
    hour_end: str
    kind: EntryKind
    version: int
    rows: int
    late: int
    files: tuple[str, ...]
    sealed_at: str  # wall clock, for freshness reports only
    run_id: str
    ready_time: str | None  # the global ready time that sealed it
    processing_time: str
    folded_through_batch: int  # late rows of batches <= this are in the hour (amend)
    quality: dict[str, Any] = field(default_factory=dict)
    # The table's schema version the step wrote the hour with (``tidemark.evolution``); the
    # quality gate and a rebuild of the hour use it. 0: recorded before schema history.
    schema_version: int = 0
    dropped: tuple[str, ...] = ()  # RETENTION: the hour keys it dropped

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", EntryKind(self.kind))  # a plain string is accepted

    @property
    def published(self) -> bool:
        return self.kind.published

    @property
    def quarantined(self) -> bool:
        return self.kind.quarantined

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = str(self.kind)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JournalEntry:
        data = dict(data)
        data["files"] = tuple(data["files"])
        data["dropped"] = tuple(data.get("dropped", ()))
        data["kind"] = EntryKind(data["kind"])
        return cls(**data)


@dataclass
class JournalState:
    """Latest journal entry per hour plus the sealed frontier; hours dropped by retention
    (before ``kept_from``) are gone from ``hours``."""

    last_seq: int = -1
    sealed_through: str | None = None
    hours: dict[str, JournalEntry] = field(default_factory=dict)
    kept_from: str | None = None  # ISO instant: the start of the first hour retention kept
    dropped: int = 0  # hours dropped by retention, all told

    def apply(self, entry: JournalEntry) -> None:
        self.last_seq = entry.seq
        if entry.kind is EntryKind.RETENTION:
            if self.kept_from is None or entry.hour_start > self.kept_from:
                self.kept_from = entry.hour_start
            self.dropped += len(entry.dropped)
            self.hours = {k: e for k, e in self.hours.items() if e.hour_start >= self.kept_from}
            return
        if self.kept_from is not None and entry.hour_start < self.kept_from:
            log.warning(
                "%s: ignoring %s of hour %s, dropped by retention", entry.table, entry.kind, entry.hour
            )
            return
        self.hours[entry.hour] = entry
        if entry.kind.decides and (self.sealed_through is None or entry.hour_end > self.sealed_through):
            self.sealed_through = entry.hour_end

    def dropped_by_retention(self, hour_start: datetime) -> bool:
        """Whether the hour starting at ``hour_start`` is before the first hour retention kept."""
        return self.kept_from is not None and hour_start < datetime.fromisoformat(self.kept_from)

    @property
    def oldest_hour(self) -> str | None:
        """The key of the oldest hour the journal holds (none yet: None)."""
        return min(self.hours, key=lambda key: self.hours[key].hour_start, default=None)

    def quarantined(self) -> list[str]:
        """Hour keys currently quarantined, in order."""
        return sorted(k for k, e in self.hours.items() if e.quarantined)

    def to_json(self) -> dict[str, Any]:
        return {
            "last_seq": self.last_seq,
            "sealed_through": self.sealed_through,
            "hours": {k: v.to_json() for k, v in self.hours.items()},
            "kept_from": self.kept_from,
            "dropped": self.dropped,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JournalState:
        hours = {k: JournalEntry.from_json(v) for k, v in data.get("hours", {}).items()}
        return cls(
            data["last_seq"], data.get("sealed_through"), hours, data.get("kept_from"), data.get("dropped", 0)
        )


class HourJournal:
    def __init__(self, state_dir: Location | Path, table: str) -> None:
        self.table = table
        self.root = Location(state_dir) / table / "partitions"
        self.journal = self.root / "journal"
        self.checkpoint_file = self.root / "checkpoint.json"
        self.announced_file = self.root / "announced.json"
        self._log = SequentialLog(self.journal, self.checkpoint_file)

    def entry(self, seq: int) -> JournalEntry | None:
        data = self._log.read(seq)
        return JournalEntry.from_json(data) if data else None

    def entries(self, since: int = 0) -> Iterator[JournalEntry]:
        for _, data in self._log.records(since):
            yield JournalEntry.from_json(data)

    def state(self) -> JournalState:
        data = self._log.read_checkpoint()
        state = JournalState.from_json(data) if data else JournalState()
        for entry in self.entries(state.last_seq + 1):
            state.apply(entry)
        return state

    def append(self, entry: JournalEntry) -> None:
        if not self._log.create(entry.seq, entry.to_json()):
            raise BatchConflictError(
                f"{self.table}: journal entry {entry.seq} ({entry.kind} of hour {entry.hour}) was written "
                "by another process first"
            )
        log.info(
            "%s: %s hour %s v%s recorded (rows %s, late %s, files %s)",
            self.table,
            entry.kind,
            entry.hour,
            entry.version,
            entry.rows,
            entry.late,
            len(entry.files),
        )
        if (entry.seq + 1) % CHECKPOINT_EVERY == 0:
            self._log.write_checkpoint(self.state().to_json())

    # -- announcements -------------------------------------------------------------------
    def announced_through(self) -> int:
        data = read_json(self.announced_file)
        return int(data["seq"]) if data else -1

    def mark_announced(self, seq: int) -> None:
        if seq > self.announced_through():
            replace_atomically(self.announced_file, {"seq": seq})
