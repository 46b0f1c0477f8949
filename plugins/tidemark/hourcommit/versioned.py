"""``HourVersions`` in directories of their own: on an object store (S3: no rename), with
``output.layout: versioned``, and for every Iceberg table. A version is a directory written
once where it stays, and readers change versions only by being pointed at another one (a
metastore partition's location, an Iceberg snapshot).

- **draft**: ``<table>/<hour>/_versions/v<version>-b<last batch>``, named by its content (a
  retry finds its own, complete, and reuses it), claimed by the writer's lease before
  anything is written (``versions.claim_version``: a live owner's directory is never
  touched, a dead one's gets a sibling); every version holds the whole hour;
- **complete**: its marker, written last, names every file; a directory without one is a
  crashed attempt's and is never pointed at;
- **reveal**: nothing moves, once the directory is checked to be the version meant and
  whole: the publication points readers at it (a metastore switch of the hour's partitions:
  add, then ``SET LOCATION``; or one Iceberg snapshot), then ``_SUCCESS`` in it: readers see
  one version or another;
- **collect**: version directories no partition points at, after ``output.version_retention``
  of processing time and of wall-clock time (``versions.VersionCollector``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.errors import RebuildError
from tidemark.hourcommit.base import Draft, HourVersions, HourWriting, PublishedHour, Writer, Written
from tidemark.hourcommit.versions import claim_version, completed_version, mark_version
from tidemark.state.layout import COMPACTED_MARKER, sealed_file_prefix
from tidemark.time.hours import Hour

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from tidemark.state.journal import JournalState

log = logging.getLogger(__name__)


class OwnDirectoryVersions(HourVersions):
    """Versions written once as directories named by their content; readers pointed at one."""

    own_directories = True

    def _named(self, hour_path: str, version: int, through: int) -> str:
        return self.layout.relative(self.layout.hour_version(hour_path, version, through))

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
        """A directory named by the version and the last batch it holds: a complete one (its
        marker, and every file the marker names) is reused by a retry; else this writer claims
        it (one without a marker is a crashed attempt's, never pointed at). ``scratch`` holds
        only a rebuild's read receipts."""
        named = self._named(hour.path, version, through)
        done = completed_version(self.store, named)
        if done is not None:
            home = self.layout.warehouse / done.directory
            log.info(
                "%s: hour %s v%s already written in %s",
                self.layout.table,
                hour.key,
                version,
                self.layout.uri(home),
            )
            return Draft(hour, step, version, home, home, sealed_file_prefix(1), done=done)
        home = self.layout.warehouse / claim_version(self.store, named, writer.lease)
        return Draft(hour, step, version, home, home, sealed_file_prefix(1))

    def write(
        self,
        draft: Draft,
        frame: DataFrame,
        n_files: int,
        *,
        files: HourWriting,
        sort_by: tuple[str, ...] = (),
    ) -> Written:
        """Each Spark task writes its file once under its final name (no rename: an object
        store has none)."""
        return files.write_version(frame, draft.directory, draft.prefix, n_files, sort_by=sort_by)

    def complete(self, draft: Draft, written: Written, writer: Writer) -> tuple[list[str], Path]:
        """Its marker, written last (the files stay where they were written)."""
        version = mark_version(self.store, self.layout.relative(draft.directory), written)
        return version.files, draft.directory

    def reveal(self, hour: Hour, home: Path, *, version: int, writer: Writer) -> tuple[Path, bool]:
        """Nothing moves: the directory is checked to be version ``version`` of the hour (a
        step paused while the hour changed must not point it back) and whole (its marker names
        its files, and every one is there: none deleted under a paused step)."""
        named = self.layout.hour_version(hour.path, version, 0).name.rsplit("-b", 1)[0]
        if not home.name.startswith(f"{named}-b"):
            raise RebuildError(
                f"{self.layout.table} hour {hour.key} is no longer at the version before v{version}: "
                f"{self.layout.uri(home)} is not its next version; nothing was switched: retry the step"
            )
        directory = self.layout.relative(home)
        marker = self.store.read_json(f"{directory}/{COMPACTED_MARKER}")
        missing = sorted(set(marker["files"]) - set(self.store.files(directory))) if marker else []
        if marker is None or missing:
            raise RebuildError(
                f"{self.layout.table} hour {hour.key}: {self.layout.uri(home)} is not whole "
                f"({'no marker' if marker is None else f'{len(missing)} files missing'}); nothing was "
                "switched: retry the step (it writes the version again)"
            )
        writer.check()
        return home, True

    def where(self, version: PublishedHour) -> Path:
        """Its version directory (published or not: a quarantined one is only unregistered)."""
        directory = version.directory or self._named(version.path, version.version, version.folded_through)
        return self.layout.warehouse / directory

    def sweep(self, partitions: JournalState, zone: str) -> None:
        """Nothing: a version is never staged beside the hour (its directory is its own)."""
