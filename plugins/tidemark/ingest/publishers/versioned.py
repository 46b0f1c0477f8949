"""Publishing a batch on an object store (no rename): written once, in place.

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

import logging
from collections.abc import Collection

from tidemark.errors import ReconciliationError
from tidemark.faults import crash_point
from tidemark.ingest.publishers.base import BatchPublisher, attempt_token
from tidemark.ingest.staging import KINDS, StagingTargets
from tidemark.state.layout import REPLAYED_MARKER, batch_of_file, token_of_file

log = logging.getLogger(__name__)


class VersionedPublisher(BatchPublisher):
    """Lists the files an attempt's tasks wrote in their final places; rolls back earlier
    attempts by their lease tokens; shows dirty records after the commit record."""

    def staging_targets(self) -> StagingTargets:
        """Final places: the tasks write each file once under its batch-carrying name."""
        final = {
            "rows": self.layout.relative(self.layout.open_dir),
            "late": self.layout.relative(self.layout.late_open_dir),
            "dirty": self.layout.relative(self.layout.open_dirty_dir(self.batch_id)),
        }
        return StagingTargets(
            self.store, self.layout.relative(self.attempt_dir), self.batch_id, final, self.token
        )

    def written(self) -> dict[str, list[str]]:
        return self._attempt_files()

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
        token = token_of_file(name) if name.endswith(".parquet") else attempt_token(name)
        return token is None or self.token is None or token < self.token

    def rollback(self) -> int:
        """The files earlier attempts of the uncommitted batch wrote in the hidden
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

    def publish(self, retire: tuple[int, ...] = ()) -> list[str]:
        """Keep the replayed batches' inputs (``retire``), then write the manifest of what this
        attempt's tasks wrote; returns those files (the commit record lists them, dirty files
        where ``finish`` shows them)."""
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

    def finish(self, committed: Collection[str] = ()) -> int:
        """After the commit record: retire the replayed inputs, show the committed dirty files
        (only those: an attempt that lost the batch may have left files beside them), drop the
        staging; idempotent. Returns the dirty files shown."""
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
