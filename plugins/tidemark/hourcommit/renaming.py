"""``HourVersions`` on a filesystem with rename (local disk, HDFS): a version is staged in a
hidden directory of its writer's own and renamed into place.

- **draft**: a scratch directory under ``.tidemark_staging`` marked with the writer's lease
  token (older tokens' scratch is removed first); a compaction whose marker holds the
  committed rows is reused, one whose marker holds other rows is stale (a seal failed before
  its journal entry, and batches committed rows since) and is compacted again;
- **complete**: a marker (``_tidemark_compacted.json``) naming the files and rows, written
  last; the compacted hour then enters the hidden ``<table>/_sealing/<hour>`` in one rename,
  which a directory already there refuses (the local disk's fence against a seal paused past
  its lease), or a stale one is exchanged for it in whole; an amend's new files move into
  the live directory one rename each (readers see the old version or the new one);
- **reveal**: rename (or ``renameat2`` exchange) into ``<table>/<hour>``, where the hour's
  partitions stay (``ADD IF NOT EXISTS``); a rebuild's ``_SUCCESS`` swaps in with its files;
- nothing to collect: a replaced version is swapped out and removed with the writer's scratch.
"""

from __future__ import annotations

import errno
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.errors import VersionConflictError
from tidemark.hourcommit.base import Draft, HourVersions, HourWriting, PublishedHour, Writer, Written
from tidemark.hourcommit.versions import WrittenVersion
from tidemark.state.layout import compaction_marker, sealed_file_prefix, write_success
from tidemark.state.storage import read_json, replace_atomically
from tidemark.tableformat import file_rows
from tidemark.tablefs import data_files, exchange_directories
from tidemark.time.hours import Hour, parse_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from tidemark.state.journal import JournalState

log = logging.getLogger(__name__)

SCRATCH_OWNER = "_owner.json"  # the lease token of a seal's scratch directory


class RenamingVersions(HourVersions):
    """Versions staged aside and renamed into place (one filesystem: staging renames in)."""

    def draft(
        self,
        hour: Hour,
        step: str,
        *,
        version: int,
        through: int,
        writer: Writer,
        rows: int | None = None,
        scratch: Path | None = None,
    ) -> Draft:
        writer.check()  # a claim is a live lease's (the scratch of older ones is removed)
        target = self.layout.table_dir / hour.path
        if step == "compact":
            return self._draft_compaction(hour, target, writer, rows)
        if step == "amend":  # the late rows only, moved in beside the hour's files
            staging = self.layout.step_staging("amend", hour.key, f"v{version}")
            shutil.rmtree(staging, ignore_errors=True)
            return Draft(hour, step, version, staging, target, sealed_file_prefix(version), appends=True)
        if scratch is None:
            raise ValueError(f"{self.layout.table} hour {hour.key}: a rebuild needs its scratch")
        shutil.rmtree(scratch, ignore_errors=True)  # the whole hour, swapped in at reveal
        (scratch / "hour").mkdir(parents=True)
        return Draft(hour, step, version, scratch / "hour", target, sealed_file_prefix(1))

    def _draft_compaction(self, hour: Hour, target: Path, writer: Writer, rows: int | None) -> Draft:
        """A marker records a compaction's result, so a retry after registration never
        rewrites a visible hour for nothing. A marker whose count differs from the commit
        log's is stale: a seal failed after compacting and before its journal entry
        (metastore, quality gate, a kill), and batches committed rows for the hour since. The
        hour is then compacted again from its batch files (all still in ``_open``) and
        exchanged in whole, so readers of an hour registered by the failed attempt see the old
        files or the new ones, never a mix. Until it passes the quality gate, a compacted hour
        lives in the hidden ``_sealing`` directory (readers by path and ``MSCK REPAIR`` never
        see it; a quarantined hour stays there until it is released)."""
        hidden = self.layout.sealing_dir / hour.path
        home = target if read_json(compaction_marker(target)) is not None else hidden
        done = read_json(compaction_marker(home))
        prefix = sealed_file_prefix(1)
        if done is None:
            self._clear_residue(hour, writer)  # a crashed attempt's; never registered
            return Draft(hour, "compact", 1, self._scratch("compacted", hour, writer), target, prefix)
        if rows is None or int(done["rows"]) == rows:
            found = WrittenVersion(list(done["files"]), int(done["rows"]), reused=True)
            return Draft(hour, "compact", 1, home, target, prefix, done=found)
        log.warning(
            "%s: hour %s was compacted with %s rows by a seal that failed before its journal entry; "
            "batches committed since hold %s rows for it: compacting again",
            self.layout.table,
            hour.key,
            done["rows"],
            rows,
        )
        new_dir = self._scratch("recompact", hour, writer) / "hour"
        new_dir.mkdir()
        return Draft(hour, "compact", 1, new_dir, target, prefix, replaces=home)

    def write(
        self,
        draft: Draft,
        frame: DataFrame,
        n_files: int,
        *,
        files: HourWriting,
        sort_by: tuple[str, ...] = (),
    ) -> Written:
        """Spark's own writer (faster than its tasks writing through pyarrow) into a sibling of
        the draft, then each file renamed into the draft as ``<prefix>-NNNNN``, its rows read
        from its footer: what arrived, never more."""
        from tidemark.sparkfiles import into_files

        staging = draft.directory.with_name(f"{draft.directory.name}.spark")
        shutil.rmtree(staging, ignore_errors=True)
        spread = into_files(frame, n_files)
        files.write_staged(spread.sortWithinPartitions(*sort_by) if sort_by else spread, staging)
        written = []
        for i, staged in enumerate(data_files(staging)):
            final = (
                draft.directory
                / staged.parent.relative_to(staging)
                / f"{draft.prefix}-{i:05d}{staged.suffix}"
            )
            final.parent.mkdir(parents=True, exist_ok=True)
            staged.replace(final)
            written.append((self.layout.relative(final), file_rows(str(final), final.suffix)))
        shutil.rmtree(staging, ignore_errors=True)
        return written

    def complete(self, draft: Draft, written: Written, writer: Writer) -> tuple[list[str], Path]:
        if draft.appends:  # each new file renamed into the live hour: the old version or the new
            writer.check()
            return self._move_in(draft.directory, draft.named_under, written), draft.named_under
        files = [self._named(draft, path) for path, _ in written]
        replace_atomically(
            compaction_marker(draft.directory), {"files": files, "rows": sum(n for _, n in written)}
        )
        if draft.step == "rebuild":  # its _SUCCESS swaps in with its files
            rows = sum(n for _, n in written)
            write_success(
                self.store, self.layout.relative(draft.directory), draft.hour.key, rows, draft.version
            )
            return files, draft.directory
        if draft.replaces is None:
            return files, self._enter(draft.directory, draft.hour, writer)
        writer.check()  # a seal past its lease never swaps its version in
        exchange_directories(draft.directory, draft.replaces)
        shutil.rmtree(draft.directory.parent, ignore_errors=True)  # now holds the stale version
        return files, draft.replaces

    def _named(self, draft: Draft, path: str) -> str:
        """A file written into the draft, as readers will see it (under the hour's directory)."""
        inside = (self.layout.warehouse / path).relative_to(draft.directory)
        return self.layout.relative(draft.named_under / inside)

    def _move_in(self, staging: Path, target: Path, written: Written) -> list[str]:
        moved = []
        for path, _ in written:
            staged = self.layout.warehouse / path
            final = target / staged.relative_to(staging)
            final.parent.mkdir(parents=True, exist_ok=True)
            staged.replace(final)
            moved.append(self.layout.relative(final))
        shutil.rmtree(staging, ignore_errors=True)
        return moved

    def _clear_residue(self, hour: Hour, writer: Writer) -> None:
        """A crashed attempt's version of the hour, removed by the lease's holder only (a seal
        paused past its lease must not delete what its successor published); a directory with
        a compaction marker is a finished version, never residue."""
        writer.check()
        for residue in (self.layout.sealing_dir / hour.path, self.layout.table_dir / hour.path):
            if read_json(compaction_marker(residue)) is not None:
                raise VersionConflictError(
                    f"{self.layout.table}: hour {hour.key} was compacted meanwhile: {residue}"
                )
            shutil.rmtree(residue, ignore_errors=True)

    def _scratch(self, step: str, hour: Hour, writer: Writer) -> Path:
        """An empty scratch directory of this writer's own for ``step`` of ``hour``, marked
        with its lease token; the scratch of older leases of the hour (crashed attempts, or a
        seal paused past its lease: whatever it still writes, its marker counts only what
        arrived) is removed first."""
        for kind in ("seal", "recompact", "compacted"):
            for old in self.layout.staging_root.glob(f"{kind}-{hour.key}-*"):
                owner = read_json(old / SCRATCH_OWNER) or {}
                if int(owner.get("token", -1)) < writer.token:
                    shutil.rmtree(old, ignore_errors=True)
        name = f"{writer.run_id}-t{writer.token}" if writer.lease is not None else writer.run_id
        scratch = self.layout.step_staging(step, hour.key, name)
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        replace_atomically(scratch / SCRATCH_OWNER, {"token": writer.token, "run_id": writer.run_id})
        return scratch

    def _enter(self, private: Path, hour: Hour, writer: Writer) -> Path:
        """Make this writer's complete directory the hour's hidden one: one rename, which a
        directory already there refuses. So a seal paused past its lease never writes into the
        directory its successor compacted (or quarantined) the hour in."""
        hidden = self.layout.sealing_dir / hour.path
        hidden.parent.mkdir(parents=True, exist_ok=True)
        try:
            private.rename(hidden)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                raise
            shutil.rmtree(private, ignore_errors=True)  # its own: nobody else reads it
            raise VersionConflictError(
                f"{self.layout.table} hour {hour.key}: {hidden} was written by another seal meanwhile; "
                f"nothing of run {writer.run_id}'s entered it (its lease may have expired): retry"
            ) from None
        (hidden / SCRATCH_OWNER).unlink(missing_ok=True)  # the scratch's mark, not the hour's
        return hidden

    def reveal(self, hour: Hour, home: Path, *, version: int, writer: Writer) -> tuple[Path, bool]:
        """Move a checked version from where it was staged (hidden ``_sealing``, a rebuild's
        scratch) to the hour's directory: one rename, or an exchange with the version there,
        which is then removed."""
        target = self.layout.table_dir / hour.path
        writer.check()
        if home == target or not home.exists():
            return target, True
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            home.rename(target)
            return target, True
        atomic = exchange_directories(home, target)
        shutil.rmtree(home, ignore_errors=True)  # the version it replaced
        return target, atomic

    def where(self, version: PublishedHour) -> Path:
        """The hour's directory once published; hidden in ``_sealing`` until then."""
        base = self.layout.table_dir if version.published else self.layout.sealing_dir
        return base / version.path

    def sweep(self, partitions: JournalState, zone: str) -> None:
        table, sealing = self.layout.table, self.layout.sealing_dir
        for hidden in sealing.glob("dt=*/hr=*"):  # a published hour's is a zombie's
            entry = partitions.hours.get(parse_path(str(hidden.relative_to(sealing)), zone).key)
            if entry is not None and entry.published:
                log.warning("%s: removing %s beside the published hour %s", table, hidden, entry.hour)
                shutil.rmtree(hidden, ignore_errors=True)
