"""The partition journal: what sealing did to each hour, in order.

Layout under ``$TIDEMARK_HOME/state/<table>/partitions``::

    journal/<seq>.json   one entry per seal, amend, quarantine or release of an hour
                         (create-only, sequential)
    checkpoint.json      per-hour latest state up to some seq (atomically replaced)
    announced.json       the highest seq whose Asset event Airflow is known to hold

Sealing is in hour order, so the sealed hours are exactly those before ``sealed_through``;
that single instant is what a dump plan records to decide which records are late.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tidemark.errors import BatchConflictError
from tidemark.storage import Location, create_only, read_json, replace_atomically

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 50


@dataclass(frozen=True)
class JournalEntry:
    """One step of an hour partition: ``seal`` (version 1), ``amend`` (version > 1),
    ``quarantine`` (blocked by the quality gate: version 0, not registered) or ``release``
    (a quarantined hour registered after a person's decision: version 1)."""

    seq: int
    table: str
    hour: str  # partition key, e.g. 2026-11-22T10
    hour_start: str
    hour_end: str
    kind: str  # seal | amend | quarantine | release
    version: int
    rows: int
    late: int
    files: tuple[str, ...]
    sealed_at: str  # wall clock, for freshness reports only
    run_id: str
    ready_time: str | None  # the global ready time that sealed it
    processing_time: str
    folded_through_batch: int  # late rows of batches <= this are in the partition (amend)
    quality: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JournalEntry:
        data = dict(data)
        data["files"] = tuple(data["files"])
        return cls(**data)


@dataclass
class PartitionState:
    """Latest journal entry per hour plus the sealed frontier."""

    last_seq: int = -1
    sealed_through: str | None = None
    hours: dict[str, JournalEntry] = field(default_factory=dict)

    def apply(self, entry: JournalEntry) -> None:
        self.last_seq = entry.seq
        self.hours[entry.hour] = entry
        decided = entry.kind in ("seal", "quarantine")  # a quarantined hour is decided, not published
        if decided and (self.sealed_through is None or entry.hour_end > self.sealed_through):
            self.sealed_through = entry.hour_end

    def to_json(self) -> dict[str, Any]:
        return {
            "last_seq": self.last_seq,
            "sealed_through": self.sealed_through,
            "hours": {k: v.to_json() for k, v in self.hours.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PartitionState:
        hours = {k: JournalEntry.from_json(v) for k, v in data.get("hours", {}).items()}
        return cls(data["last_seq"], data.get("sealed_through"), hours)


def _name(seq: int) -> str:
    return f"{seq:010d}.json"


class PartitionJournal:
    def __init__(self, state_dir: Location | Path, table: str) -> None:
        self.table = table
        self.root = Location(state_dir) / table / "partitions"
        self.journal = self.root / "journal"
        self.checkpoint_file = self.root / "checkpoint.json"
        self.announced_file = self.root / "announced.json"

    def entry(self, seq: int) -> JournalEntry | None:
        data = read_json(self.journal / _name(seq))
        return JournalEntry.from_json(data) if data else None

    def entries(self, since: int = 0) -> Iterator[JournalEntry]:
        seq = since
        while (entry := self.entry(seq)) is not None:
            yield entry
            seq += 1

    def state(self) -> PartitionState:
        data = read_json(self.checkpoint_file)
        state = PartitionState.from_json(data) if data else PartitionState()
        for entry in self.entries(state.last_seq + 1):
            state.apply(entry)
        return state

    def append(self, entry: JournalEntry) -> None:
        if not create_only(self.journal / _name(entry.seq), entry.to_json()):
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
            replace_atomically(self.checkpoint_file, self.state().to_json())

    # -- announcements -------------------------------------------------------------------
    def announced_through(self) -> int:
        data = read_json(self.announced_file)
        return int(data["seq"]) if data else -1

    def mark_announced(self, seq: int) -> None:
        if seq > self.announced_through():
            replace_atomically(self.announced_file, {"seq": seq})
