"""Builders of state records for unit tests."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from tidemark.snapshot.snapshots import SnapshotRecord
from tidemark.state.journal import EntryKind, JournalEntry


def journal_entry(
    hour: str,
    kind: str = "seal",
    version: int | None = None,
    *,
    seq: int = 0,
    table: str = "t",
    **fields: Any,
) -> JournalEntry:
    """A journal entry of hour key ``hour`` (a UTC hour): version 0 when quarantined, else 1,
    unless given; any other field by keyword."""
    start = datetime.fromisoformat(f"{hour}:00:00+00:00")
    values: dict[str, Any] = {
        "seq": seq,
        "table": table,
        "hour": hour,
        "hour_start": start.isoformat(),
        "hour_end": (start + timedelta(hours=1)).isoformat(),
        "kind": EntryKind(kind),
        "version": (0 if kind == "quarantine" else 1) if version is None else version,
        "rows": 1,
        "late": 0,
        "files": (),
        "sealed_at": "",
        "run_id": "r",
        "ready_time": None,
        "processing_time": "",
        "folded_through_batch": -1,
    }
    values.update(fields)
    return JournalEntry(**values)


def snapshot_record(
    label: str, kind: str, through: str = "2026-11-22T10:00:00+00:00", **fields: object
) -> SnapshotRecord:
    """A snapshot log record of ``label``; any other field by keyword."""
    base = SnapshotRecord(
        seq=0,
        table="orders",
        label=label,
        kind=kind,
        version=1,
        run_id=f"run-{label}",
        through=through,
        increments_from=through,
        rows=1,
        files=(),
        created_at=through,
    )
    return replace(base, **fields)  # type: ignore[arg-type]
