"""The last run of each maintenance step of a table (retention, compact, expire_snapshots,
verify): what it did, in counts and bytes, for the health page and ``tidemark status``.

One JSON file beside the journal, replaced whole by each step (the steps of one maintenance
run follow each other). Display only: no decision reads it, so a lost update costs a stale
line on a page, never a wrong answer."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tidemark.state.storage import Location, read_json, replace_atomically

FILE = "maintenance.json"
SHAPE = "hour_bytes.json"  # bytes per sealed hour, as the last compaction step listed them
STEPS = ("retention", "compact", "expire_snapshots", "verify")  # in the order the DAG runs them


def record_step(root: Location, step: str, run_id: str, summary: dict[str, Any]) -> None:
    """Keep ``summary`` as the last run of ``step`` (``root``: the table's journal directory)."""
    steps = last_steps(root)
    steps[step] = {"run_id": run_id, "at": datetime.now().astimezone().isoformat(), **summary}
    replace_atomically(root / FILE, {"steps": steps})


def record_shape(root: Location, bytes_per_hour: dict[str, int]) -> None:
    """Keep the bytes of each sealed hour's current files (the compaction step lists them
    anyway; a page render never lists the store)."""
    replace_atomically(root / SHAPE, {"bytes_per_hour": bytes_per_hour})


def last_shape(root: Location) -> dict[str, int]:
    """Hour key -> bytes, as of the last compaction step; empty before one ran."""
    return dict((read_json(root / SHAPE) or {}).get("bytes_per_hour", {}))


def last_steps(root: Location) -> dict[str, dict[str, Any]]:
    """Step -> its last run's summary (``run_id``, ``at`` and the step's own counts)."""
    return dict((read_json(root / FILE) or {}).get("steps", {}))


def describe_steps(steps: dict[str, dict[str, Any]]) -> list[str]:
    """One line per step that ran, in the DAG's order."""
    lines = []
    for step in STEPS:
        if step not in steps:
            continue
        info = dict(steps[step])
        when, run = info.pop("at"), info.pop("run_id")
        counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in info.items())
        lines.append(f"{step} at {when} (run {run}): {counts}")
    return lines
