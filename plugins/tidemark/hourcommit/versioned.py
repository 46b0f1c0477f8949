"""``HourVersions`` in directories of their own: on an object store (S3: no rename), with
``output.layout: versioned``, and for every Iceberg table. A version is a directory written
once where it stays, and readers change versions only by being pointed at another one (a
metastore partition's location, an Iceberg snapshot).

- **stage**: ``<table>/<hour>/_versions/v<version>-b<last batch>``, named by its content (a
  retry finds its own), claimed by the writer's lease before anything is written
  (``versions.claim_version``: a live owner's directory is never touched, a dead one's gets a
  sibling);
- **complete**: its marker, written last, names every file; a directory without one is a
  crashed attempt's and is never pointed at;
- **reveal**: nothing moves: the publication points readers at the directory (a metastore
  switch of the hour's partitions: add, then ``SET LOCATION``; or one Iceberg snapshot), then
  ``_SUCCESS`` in it: readers see one version or another;
- **collect**: version directories no partition points at, after ``output.version_retention``
  of processing time and of wall-clock time (``versions.VersionCollector``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.errors import RebuildError, ReconciliationError
from tidemark.faults import crash_point
from tidemark.hourcommit.base import (
    Compacted,
    HourVersions,
    HourWriting,
    PublishedHour,
    Writer,
    Written,
)
from tidemark.hourcommit.versions import (
    VersionCollector,
    claim_version,
    entry_directory,
    mark_version,
    version_written,
    write_version_once,
)
from tidemark.state.layout import COMPACTED_MARKER, SUCCESS, sealed_file_prefix
from tidemark.time.hours import Hour

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from tidemark.config import TableConfig
    from tidemark.state.commitlog import LogState
    from tidemark.state.journal import HourJournal, JournalEntry, JournalState

log = logging.getLogger(__name__)


class OwnDirectoryVersions(HourVersions):
    """Versions written once as directories named by their content; readers pointed at one."""

    own_directories = True

    def location(self, path: Path) -> Path | str:
        return self.layout.location(path)

    def _named(self, hour_path: str, version: int, through: int) -> str:
        return self.layout.relative(self.layout.hour_version(hour_path, version, through))

    # -- stage and complete ---------------------------------------------------------------
    def compaction_done(self, hour: Hour, through: int) -> bool:
        return version_written(self.store, self._named(hour.path, 1, through))

    def hour_inputs(self, hour: Hour, through: int, files: HourWriting) -> list[Path]:
        return files.batch_files(self.layout.open_dir / hour.path, through=through)

    def claim_compaction(self, hour: Hour, through: int, writer: Writer) -> str:
        return claim_version(self.store, self._named(hour.path, 1, through), writer.lease)

    def keep_compacted(
        self, hour: Hour, directory: str, written: Written, *, complete: bool, writer: Writer
    ) -> tuple[list[str], Path]:
        if complete:
            mark_version(self.store, directory, written)
        return [path for path, _ in written], self.layout.warehouse / directory

    def compact_hour(
        self,
        hour: Hour,
        through: int,
        expected: int,
        *,
        files: HourWriting,
        writer: Writer,
        logged: Callable[..., None],
    ) -> Compacted:
        """Compact the hour's committed batch files into a new directory named by its content,
        written once and never renamed. Its marker is written last: a retry reuses a directory
        with a marker, and rewrites one without (a crashed attempt's, never registered). A
        marker that disagrees with the commit log means batch files were lost: not sealed."""

        def compact(directory: str) -> Written:
            inputs = self.hour_inputs(hour, through, files)
            if not inputs:
                return []
            home = self.layout.warehouse / directory
            size = sum(self.store.size(self.layout.relative(p)) for p in inputs)
            frame = files.read_hour(home, inputs)
            written = files.write_version(
                frame, home, sealed_file_prefix(1), files.config.output.files_for(size)
            )
            crash_point("mid_compaction")
            rows = sum(n for _, n in written)
            logged(hour, inputs=len(inputs), size=size, files=len(written), rows=rows, home=home)
            return written

        version = write_version_once(self.store, self._named(hour.path, 1, through), compact, writer.lease)
        home = self.layout.warehouse / version.directory
        if version.reused:
            if version.rows != expected:
                raise ReconciliationError(
                    f"{files.config.table} hour {hour.key}: {self.layout.uri(home)} holds {version.rows} rows but "
                    f"batches <= {through} committed {expected}; not sealed (docs/operations.md)"
                )
            log.info(
                "%s: hour %s already compacted in %s", files.config.table, hour.key, self.layout.uri(home)
            )
        return version.files, version.rows, home

    # -- publish ----------------------------------------------------------------------------
    def partition_leaves(self, target: Path, depth: int) -> list[Path]:
        """No directories on a store: the values its files lie under."""
        base = self.layout.relative(target)
        below = {f[len(base) + 1 :].rsplit("/", 1)[0] for f in self.store.files(base)}
        return sorted(target / b for b in below if b.count("/") == depth - 1)

    def mark_complete(self, target: Path, hour_key: str, rows: int, version: int) -> None:
        record = {"hour": hour_key, "rows": rows, "version": version}
        self.store.write_json(f"{self.layout.relative(target)}/{SUCCESS}", record)

    def published_dir(self, hour: Hour, home: Path) -> Path:
        return home  # the partition points at the version directory itself

    def reveal(self, home: Path, target: Path, writer: Writer) -> None:
        """Nothing moves: the metastore switch publishes the version directory."""

    def release_dirs(self, hour: Hour, entry: JournalEntry) -> tuple[Path, Path]:
        """Its version directory was written, only not registered."""
        directory = self.layout.warehouse / entry_directory(self.layout, hour.path, entry)
        return directory, directory

    # -- late rows --------------------------------------------------------------------------
    def amend(
        self,
        hour: Hour,
        current: JournalEntry | None,
        new_files: list[Path],
        *,
        version: int,
        through: int,
        files: HourWriting,
        writer: Writer,
    ) -> tuple[Path, list[str], int]:
        """The hour's current files and its new late rows written once as the hour's next
        version directory (the whole hour: a registered directory never changes), which the
        partition is then pointed at."""
        before = current.rows if current else 0

        def rewrite(directory: str) -> Written:
            home = self.layout.warehouse / directory
            inputs = [*(self.layout.warehouse / f for f in (current.files if current else ())), *new_files]
            late = sum(self.store.rows(self.layout.relative(p)) for p in new_files)
            size = sum(self.store.size(self.layout.relative(p)) for p in inputs)
            n_files = files.config.output.files_for(size)
            written = files.write_version(files.read_hour(home, inputs), home, sealed_file_prefix(1), n_files)
            rows = sum(n for _, n in written)
            if rows != before + late:
                raise ReconciliationError(
                    f"{files.config.table} hour {hour.key}: amend to v{version} wrote {rows} rows != {before} "
                    f"sealed + {late} late rows of batches <= {through}; not registered"
                )
            return written

        written = write_version_once(
            self.store, self._named(hour.path, version, through), rewrite, writer.lease
        )
        return self.layout.warehouse / written.directory, written.files, written.rows - before

    # -- rebuild ----------------------------------------------------------------------------
    def current_files(self, hour: Hour, entry: JournalEntry | None) -> list[Path]:
        """The files of its registered version."""
        if entry is None:
            return []
        current = entry_directory(self.layout, hour.path, entry)
        return [self.layout.warehouse / f for f in self.store.files(current)]

    def stage_rebuild(
        self,
        hour: Hour,
        *,
        version: int,
        through: int,
        scratch: Path,
        files: HourWriting,
        writer: Writer,
        rows_of: Callable[[Path], DataFrame | None],
        reconcile: Callable[[Path, int], None],
        n_files: int,
    ) -> tuple[Path, list[str], int]:
        """Write the hour's rows once into the directory of its next version (named by the
        version and the last batch it holds), marker last; a retry reuses a directory with a
        marker and rewrites one without. The scratch holds only the read's receipts."""

        def reread(directory: str) -> Written:
            receipts = scratch / "receipts"
            frame = rows_of(receipts)
            if frame is None:
                return []
            home = self.layout.warehouse / directory

            written = files.write_version(
                frame, home, sealed_file_prefix(1), n_files, sort_by=("_mq_partition", "_mq_offset")
            )
            crash_point("mid_rebuild")
            reconcile(receipts, sum(n for _, n in written))
            return written

        written = write_version_once(
            self.store, self._named(hour.path, version, through), reread, writer.lease
        )
        home = self.layout.warehouse / written.directory
        if written.reused:
            log.info(
                "%s: hour %s v%s already written in %s",
                files.config.table,
                hour.key,
                version,
                self.layout.uri(home),
            )
        return home, written.files, written.rows

    def publish_rebuilt(
        self,
        hour: Hour,
        *,
        current_version: int,
        through: int,
        staged: Path,
        written: list[str],
        rows: int,
        writer: Writer,
        register: Callable[[Path], None],
    ) -> bool:
        """Point the partition at the new version's directory (one ``SET LOCATION``), after
        checking that it is the next version of the hour and whole."""
        version = current_version + 1
        named = self.layout.hour_version(hour.path, version, through).name
        if staged.name != named and not staged.name.startswith(f"{named}-"):
            raise RebuildError(
                f"{self.layout.table} hour {hour.key} changed to v{current_version} while it was rebuilt "
                f"into {staged}; nothing was switched: retry the rebuild"
            )
        self._verify_complete(hour, staged, written)
        writer.check()
        register(staged)
        crash_point("after_swap")
        self.mark_complete(staged, hour.key, rows, version)
        return True

    def _verify_complete(self, hour: Hour, staged: Path, written: list[str]) -> None:
        """The directory about to be registered is whole: its marker names the files written,
        and every one of them is there (not deleted under a paused rebuild)."""
        directory = self.layout.relative(staged)
        marker = self.store.read_json(f"{directory}/{COMPACTED_MARKER}")
        missing = sorted(set(written) - set(self.store.files(directory)))
        if marker is None or sorted(marker["files"]) != sorted(written) or missing:
            raise RebuildError(
                f"{self.layout.table} hour {hour.key}: {self.layout.uri(staged)} is not whole "
                f"({'no marker' if marker is None else f'{len(missing)} files missing'}); nothing was "
                "switched: retry the rebuild (it writes the version again)"
            )

    # -- the merge --------------------------------------------------------------------------
    def read_published(self, files: HourWriting, hours: list[PublishedHour]) -> DataFrame:
        """Each hour's registered version directory."""
        found = [
            self.layout.warehouse / f
            for h in hours
            for f in self.store.files(h.directory or self._named(h.path, h.version, h.folded_through))
        ]
        return files.read_hour(self.layout.table_dir, found)

    # -- collect ----------------------------------------------------------------------------
    def sweep_sealed(self, partitions: JournalState, zone: str) -> None:
        """Nothing: a version is never staged beside the hour (its directory is its own)."""

    def collect(
        self,
        config: TableConfig,
        journal: HourJournal,
        *,
        state: LogState,
        partitions: JournalState,
        late_locations: dict[str, str],
        writer: Writer,
        registered: Callable[[], list[str]],
    ) -> list[str]:
        writer.check()  # a zombie's collection would judge by a journal another holder moved on
        return VersionCollector(config, self.layout, journal).collect(
            state, partitions, late_locations, registered()
        )
