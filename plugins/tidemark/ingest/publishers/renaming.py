"""Publishing a batch on a filesystem with rename (local disk, HDFS): staged, then moved.

The publisher writes the manifest of (staged, target) moves before it moves anything, under
deterministic target names that carry the batch (``layout.batch_file_name``). Nothing becomes
visible before the commit record: before it, only the table's rows move, into the hidden
``_open`` directory (sealing reads only committed batches there); the late rows and dirty
records, whose directories readers see, move after the commit record (``finish``). A retry of
an uncommitted batch deletes exactly the targets of every earlier attempt's manifest, then
stages again; a committed batch whose late or dirty files did not all move yet (a crash right
after the commit record) is finished by whichever job of the table runs next.

A replay batch (``replay.py``) also *retires* the dirty records it classified again: after its
commit record, ``finish`` moves those batches' dirty directories to the hidden ``_replayed``
directory (their records are now the replay's rows or its dirty records), then makes the
replay's own files visible.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Collection

from tidemark.errors import ReconciliationError
from tidemark.faults import crash_point
from tidemark.ingest.publishers.base import BatchPublisher
from tidemark.ingest.staging import KINDS, StagingTargets
from tidemark.state.layout import batch_file_name

log = logging.getLogger(__name__)


class RenamingPublisher(BatchPublisher):
    """Moves a batch's staged files into the table under deterministic names, and undoes an
    uncommitted attempt's moves through the manifest it wrote before moving anything."""

    def staging_targets(self) -> StagingTargets:
        """Staged under the attempt's directory, then moved."""
        return StagingTargets(self.store, self.layout.relative(self.attempt_dir), self.batch_id)

    def written(self) -> dict[str, list[str]]:
        attempt = self.layout.relative(self.attempt_dir)
        return {kind: self.store.files(f"{attempt}/{kind}") for kind in KINDS}

    def rollback(self) -> int:
        """Delete files earlier uncommitted attempts of this batch published or staged."""
        removed = 0
        for manifest in sorted(self.batch_dir.glob("attempt-*/publish.json")):
            for _, target in json.loads(manifest.read_text())["moves"]:
                path = self.layout.warehouse / target
                if path.exists():
                    path.unlink()
                    removed += 1
        if self.batch_dir.exists():
            shutil.rmtree(self.batch_dir)
        if removed:
            log.warning("batch %s: rolled back %s files of an uncommitted attempt", self.batch_id, removed)
        return removed

    def targets(self) -> list[tuple[str, str]]:
        """(staged, target) pairs relative to the warehouse, in a deterministic order."""
        moves = []
        for kind, base_dir in (("rows", self.layout.open_dir), ("late", self.layout.late_dir)):
            staged_root = self.attempt_dir / kind
            for i, staged in enumerate(sorted(staged_root.rglob("*.parquet"))):
                hour_dir = staged.parent.relative_to(staged_root)
                target = base_dir / hour_dir / batch_file_name(self.batch_id, i)
                moves.append((staged, target))
        dirty = self.attempt_dir / "dirty"
        for i, staged in enumerate(sorted(dirty.rglob("*.parquet"))):
            target = self.layout.dirty_file(self.batch_id, i)
            moves.append((staged, target))
        return [(self.layout.relative(s), self.layout.relative(t)) for s, t in moves]

    def _hidden(self, target: str) -> bool:
        """Whether a target is in the hidden ``_open`` directory (moved before the commit)."""
        return (self.layout.warehouse / target).is_relative_to(self.layout.open_dir)

    def publish(self, retire: tuple[int, ...] = ()) -> list[str]:
        """Write the manifest, move the rows into ``_open``; returns every target (the commit
        record lists them all). ``retire``: batches whose dirty records this (replay) batch
        took over, hidden by ``finish``."""
        moves = self.targets()
        retired = [
            (
                self.layout.relative(self.layout.dirty_batch_dir(b)),
                self.layout.relative(self.layout.replayed_dirty_dir(b)),
            )
            for b in retire
        ]
        self.attempt_dir.mkdir(parents=True, exist_ok=True)
        manifest = self.attempt_dir / "publish.json"  # whole or absent: written aside, renamed
        aside = self.attempt_dir / f".publish.json.{uuid.uuid4().hex}"
        aside.write_text(json.dumps({"moves": moves, "retire": retired}))
        os.replace(aside, manifest)
        hidden = [(s, t) for s, t in moves if self._hidden(t)]
        for i, (staged, target) in enumerate(hidden):
            if i == len(hidden) // 2:
                crash_point("mid_move")
            self._move(staged, target)
        return [t for _, t in moves]

    def finish(self, committed: Collection[str] = ()) -> int:
        """After the commit record: move what is still staged (late rows, dirty records) to its
        visible place, then drop the staging; idempotent. Returns the files moved.
        ``committed``: the commit record's files (every target of a manifest here)."""
        moved = 0
        for manifest in sorted(self.batch_dir.glob("attempt-*/publish.json")):
            recorded = json.loads(manifest.read_text())
            for visible, hidden in recorded.get("retire", ()):
                self._retire(visible, hidden)
                crash_point("mid_retire")
            for staged, target in recorded["moves"]:
                if (self.layout.warehouse / target).exists():
                    continue
                if not (self.layout.warehouse / staged).exists():
                    raise ReconciliationError(
                        f"batch {self.batch_id} is committed but its file {target} is neither in place nor "
                        f"staged ({staged}); restore it from a backup or rebuild the hour"
                    )
                self._move(staged, target)
                moved += 1
        if moved:
            log.info(
                "batch %s: %s late/dirty files made visible after the commit record", self.batch_id, moved
            )
        shutil.rmtree(self.batch_dir, ignore_errors=True)
        return moved

    def _retire(self, visible: str, hidden: str) -> None:
        """Hide a replayed batch's dirty directory (one rename; done already on a retry)."""
        source, target = self.layout.warehouse / visible, self.layout.warehouse / hidden
        if not source.exists():
            return
        if target.exists():
            raise ReconciliationError(
                f"batch {self.batch_id}: dirty records {visible} were replayed, but {hidden} already exists; "
                "move one of them aside by hand after checking which holds the records"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
        log.info("batch %s: dirty records %s replayed, now hidden in %s", self.batch_id, visible, hidden)

    def _move(self, staged: str, target: str) -> None:
        base = self.layout.warehouse
        (base / target).parent.mkdir(parents=True, exist_ok=True)
        os.replace(base / staged, base / target)
