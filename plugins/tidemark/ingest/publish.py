"""Publishing a batch's staged files into the table, and undoing an uncommitted attempt.

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

On an object store nothing is moved (a rename there is a copy and a delete): the read tasks
wrote every file once under its final, batch-carrying name (``StagingTargets``), rows in the
hidden ``_open``, late rows in the hidden ``<table>__late/_open``; the commit record lists
them. Every file name carries the attempt's lease token (``-t0000000042``): rolling back
deletes only the files and staging of *earlier* attempts (smaller tokens), so an attempt that
lost its lease while paused can never delete what the lease's next holder wrote and committed;
files a zombie's tasks write late are ignored (the seal reads only what commit records list,
``finish`` shows only committed dirty files) and swept with the sealed hour. ``finish`` only
drops the attempt's receipts and manifest, and shows the dirty records: the tasks wrote them in
the hidden ``T__dirty/_open/batch_id=B/``, and they are copied (server-side) to
``T__dirty/batch_id=B/`` after the commit record, as the local disk moves them then. A replay
there keeps its input before its commit record
(server-side copies of the replayed batches' dirty files into ``_replayed``, a marker last:
dirty records are a small share of a batch) and ``finish`` deletes the visible originals once
the marker is there; between the commit record and that deletion the kept copy is identical,
and the next job of the table (or the next replay's plan) finishes it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Collection

from tidemark.errors import ReconciliationError
from tidemark.faults import crash_point
from tidemark.ingest.staging import KINDS, StagingTargets
from tidemark.state.layout import REPLAYED_MARKER, Layout, batch_file_name, batch_of_file, token_of_file

log = logging.getLogger(__name__)

_ATTEMPT_DIR = re.compile(r"^attempt-t(\d{10})-")


def _attempt_token(directory: str) -> int | None:
    """The lease token in an attempt directory's name (``attempt-t0000000042-<id>``)."""
    match = _ATTEMPT_DIR.match(directory)
    return int(match.group(1)) if match else None


class Publisher:
    """Moves a batch's staged files into the table under deterministic names, and undoes an
    uncommitted attempt's moves through the manifest it wrote before moving anything."""

    def __init__(self, layout: Layout, batch_id: int, token: int | None = None) -> None:
        self.layout = layout
        self.batch_id = batch_id
        self.token = token  # the attempt's lease token: in its files' names on an object store
        self.batch_dir = layout.batch_staging(batch_id)
        tag = f"t{token:010d}-" if token is not None else ""
        self.attempt_dir = self.batch_dir / f"attempt-{tag}{uuid.uuid4().hex[:12]}"
        self.store = layout.store

    def staging_targets(self) -> StagingTargets:
        """Where this attempt's read tasks write: staged (then moved), or final on an object store."""
        attempt = self.layout.relative(self.attempt_dir)
        if not self.layout.object_store:
            return StagingTargets(self.store, attempt, self.batch_id)
        final = {
            "rows": self.layout.relative(self.layout.open_dir),
            "late": self.layout.relative(self.layout.late_open_dir),
            "dirty": self.layout.relative(self.layout.open_dirty_dir(self.batch_id)),
        }
        return StagingTargets(self.store, attempt, self.batch_id, final, self.token)

    def written(self) -> dict[str, list[str]]:
        """The batch's files per kind (rows, late, dirty) as this attempt's read tasks wrote them."""
        if self.layout.object_store:
            return self._attempt_files()
        attempt = self.layout.relative(self.attempt_dir)
        return {kind: self.store.files(f"{attempt}/{kind}") for kind in KINDS}

    def _batch_files(self) -> dict[str, list[str]]:
        """Object stores: this batch's files in their final places, found by name."""
        mine = {
            kind: [
                f
                for f in self.store.files(self.layout.relative(directory))
                if batch_of_file(f.rsplit("/", 1)[-1]) == self.batch_id
            ]
            for kind, directory in (("rows", self.layout.open_dir), ("late", self.layout.late_open_dir))
        }
        mine["dirty"] = self.store.files(self.layout.relative(self.layout.open_dirty_dir(self.batch_id)))
        return mine

    def _visible_dirty(self, hidden: str) -> str:
        """Object stores: where a dirty file written in the hidden ``_open`` is shown."""
        return (
            f"{self.layout.relative(self.layout.dirty_batch_dir(self.batch_id))}/{hidden.rsplit('/', 1)[-1]}"
        )

    def rollback(self) -> int:
        """Delete files earlier uncommitted attempts of this batch published or staged."""
        if self.layout.object_store:
            return self._rollback_in_place()
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

    def _attempt_files(self) -> dict[str, list[str]]:
        """Object stores: the batch's files this attempt wrote (its token in their names)."""
        return {
            kind: [f for f in files if token_of_file(f) == self.token]
            for kind, files in self._batch_files().items()
        }

    def _predecessor(self, name: str) -> bool:
        """A file or attempt directory of an earlier attempt than this one: a smaller token (or
        none: an older release's name). Never a later attempt's: a paused job that lost its
        lease cannot delete what the lease's next holder wrote and committed."""
        token = token_of_file(name) if name.endswith(".parquet") else _attempt_token(name)
        return token is None or self.token is None or token < self.token

    def _rollback_in_place(self) -> int:
        """Object stores: the files earlier attempts of the uncommitted batch wrote in the hidden
        ``_open`` places, and their staging (receipts, manifests), chosen by their lease tokens.
        Its visible dirty directory is never touched: only a committed batch's dirty records
        are shown there (``finish``), so anything in it belongs to a commit."""
        files = [f for kind in KINDS for f in self._batch_files()[kind] if self._predecessor(f)]
        for relative in files:
            self.store.delete(relative)
        staging = self.layout.relative(self.batch_dir)
        for attempt in sorted(
            {f[len(staging) + 1 :].split("/", 1)[0] for f in self.store.all_files(staging)}
        ):
            if self._predecessor(attempt):
                self.store.delete_dir(f"{staging}/{attempt}")
        if files:
            log.warning(
                "batch %s: rolled back %s files an uncommitted attempt wrote", self.batch_id, len(files)
            )
        return len(files)

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
        if self.layout.object_store:
            for batch in retire:
                self._keep_replayed_input(batch)
            listed = self._attempt_files()
            # the commit record names the dirty files where they are shown after it (finish)
            files = [*listed["rows"], *listed["late"], *(self._visible_dirty(f) for f in listed["dirty"])]
            self.store.write_json(
                f"{self.layout.relative(self.attempt_dir)}/publish.json",
                {"files": files, "retire": list(retire)},
            )
            return files
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
        ``committed``: the commit record's files (object stores: only those are shown; an
        attempt that lost the batch may have left files beside them)."""
        if self.layout.object_store:  # replayed inputs retire, dirty records are shown
            for written in self.store.all_files(self.layout.relative(self.batch_dir)):
                if written.endswith("/publish.json") and set(self.store.read_json(written)["files"]) <= set(
                    committed
                ):
                    for batch in self.store.read_json(written).get("retire", ()):
                        self._retire_in_place(batch)
                        crash_point("mid_retire")
            shown = self._show_dirty(set(committed))
            self.store.delete_dir(self.layout.relative(self.batch_dir))
            return shown
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

    def _show_dirty(self, committed: set[str]) -> int:
        """Object stores, after the commit record: copy the batch's dirty files from the hidden
        ``T__dirty/_open/batch_id=B/`` to ``T__dirty/batch_id=B/`` (server-side copies of a
        small share of the batch, the same names again on a retry), then drop the hidden ones:
        readers of ``T__dirty`` never see an uncommitted attempt's records."""
        hidden_dir = self.layout.relative(self.layout.open_dirty_dir(self.batch_id))
        hidden = [f for f in self.store.files(hidden_dir) if self._visible_dirty(f) in committed]
        for relative in hidden:
            self.store.copy(relative, self._visible_dirty(relative))
        self.store.delete_dir(hidden_dir)
        if hidden:
            log.info("batch %s: %s dirty files shown after the commit record", self.batch_id, len(hidden))
        return len(hidden)

    def _keep_replayed_input(self, batch: int) -> None:
        """Object stores, before the commit record: copy a replayed batch's visible dirty files
        into its hidden ``_replayed`` directory (server-side copies of small files, the same
        names again on a retry), then a marker naming them."""
        source = self.layout.relative(self.layout.dirty_batch_dir(batch))
        kept = self.layout.relative(self.layout.replayed_dirty_dir(batch))
        files = self.store.files(source)
        if not files:
            raise ReconciliationError(
                f"{self.layout.table} batch {self.batch_id}: replays batch {batch}, whose dirty records "
                f"are no longer in {self.store.uri(source)}; nothing committed"
            )
        names = [f.rsplit("/", 1)[-1] for f in files]
        for relative, name in zip(files, names, strict=True):
            self.store.copy(relative, f"{kept}/{name}")
        self.store.write_json(f"{kept}/{REPLAYED_MARKER}", {"replayed_by": self.batch_id, "files": names})

    def _retire_in_place(self, batch: int) -> None:
        """Object stores, after the commit record: delete a replayed batch's visible dirty files,
        once its copy in ``_replayed`` is complete (done already on a retry)."""
        visible = self.layout.relative(self.layout.dirty_batch_dir(batch))
        kept = self.layout.relative(self.layout.replayed_dirty_dir(batch))
        if self.store.read_json(f"{kept}/{REPLAYED_MARKER}") is None:
            if not self.store.files(visible):
                return
            raise ReconciliationError(
                f"{self.layout.table} batch {self.batch_id} is committed and replayed batch {batch}, but "
                f"{self.store.uri(kept)} has no {REPLAYED_MARKER}: the visible dirty records in "
                f"{self.store.uri(visible)} are the only copy; restore the marker by hand after checking"
            )
        self.store.delete_dir(visible)
        log.info(
            "batch %s: dirty records %s replayed, kept in %s",
            self.batch_id,
            self.store.uri(visible),
            self.store.uri(kept),
        )

    def _move(self, staged: str, target: str) -> None:
        base = self.layout.warehouse
        (base / target).parent.mkdir(parents=True, exist_ok=True)
        os.replace(base / staged, base / target)
