"""How far ``retention.dirty`` has dropped a table's dirty records: the last batch whose dirty
files (visible and replayed) are gone or going. One JSON record beside the journal, moved
forward only, written before any file is deleted, so a rebuild that needs those files refuses
from that moment on (``seal/rebuild_plan.py``) rather than read a batch's once-dirty records
as rows."""

from __future__ import annotations

from typing import Any

from tidemark.state.storage import Location, read_json, replace_atomically

FILE = "dirty_retention.json"


def dropped_through(root: Location) -> int:
    """The last batch whose dirty records retention dropped; -1: none (``root``: the journal's
    directory)."""
    return int((read_json(root / FILE) or {}).get("through_batch", -1))


def record_dropped_through(root: Location, batch_id: int, detail: dict[str, Any]) -> None:
    """Move the horizon to ``batch_id`` (never back: a retry or an older run keeps it)."""
    if batch_id > dropped_through(root):
        replace_atomically(root / FILE, {"through_batch": batch_id, **detail})
