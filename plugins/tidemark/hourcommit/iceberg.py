"""``HourPublication`` of an Iceberg table (``output.table_format: iceberg``): an hour becomes
visible in one Iceberg snapshot.

Its versions are staged in directories of their own on any store (``versioned``): a version
of an hour is a directory written once, named by its content, with a marker written last; its
inputs (batch and late files) are read where the layout has the dump leave them
(``inputs``). Instead of pointing metastore partitions at the directory, one Iceberg commit
replaces the hour's data files (identity partitions ``dt``, ``hr`` and the data-derived
columns, in the table's zone: DST's repeated hour is its own partition) with the version's.
Its summary says which hour, version and directory it is, the batches it holds with their
offsets, the ready time and the run:

- a retried step finds its own commit there and commits nothing again;
- a zombie (a step that lost its lease and resumed) or an older step finds a newer version
  of the hour and commits nothing (``HourCommitConflictError``);
- a commit that lost a race with another writer of the table (Iceberg's optimistic
  concurrency) is re-planned on the new snapshot and retried.

Collect keeps every version directory a live snapshot references (time travel and running
readers), besides what the journal names; so does retention. The late side table stays a
Hive table (``publication.HivePublication``). The snapshots' expiry is ``iceberg_maintenance``.
Iceberg's Java library in the job's Spark runtime creates the table (``iceberg_java``, once);
each hour's commit is a call to the catalog (``iceberg_commit``: evolve and commit, pyiceberg,
no JVM), and pyiceberg reads it (plans, summaries, live files).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.errors import HourCommitConflictError
from tidemark.hourcommit.base import HourNote, HourVersions
from tidemark.hourcommit.iceberg_commit import (
    AddedFile,
    CatalogCommit,
    LostRaceError,
    read_footer,
)
from tidemark.hourcommit.iceberg_files import (
    PREFIX,
    last_hour_commit,
    needs_evolution,
    table_schema,
    version_of,
)
from tidemark.hourcommit.iceberg_java import JavaIceberg
from tidemark.hourcommit.iceberg_maintenance import expire
from tidemark.hourcommit.publication import HourPublication, MaintenanceResult, Specs
from tidemark.iceberg_catalog import identifier, open_catalog, spark_catalog_conf
from tidemark.lazy_session import without_pyspark
from tidemark.settings import Settings
from tidemark.state.layout import version_dir_of
from tidemark.tablefs import local_path
from tidemark.time.hours import Hour

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table as IcebergTable


log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 8  # commits lost to another writer of the table, re-planned each time
_HOUR_PATH = re.compile(r"(dt=[^/]+/hr=[^/]+)/")


class IcebergPublication(HourPublication):
    """Each version of an hour published by one Iceberg snapshot."""

    records_notes = True
    in_metastore = False
    expires_snapshots = True
    own_version_dirs = True  # a snapshot points at files: a version's never change
    int96_timestamps = False  # Iceberg's spec: timestamps as INT64 microseconds

    def __init__(self, table: str, location: Path, versions: HourVersions, settings: Settings) -> None:
        super().__init__(table, location, versions, settings)
        self._catalog: Catalog | None = None
        self._opening = threading.Lock()
        self.java = JavaIceberg(settings, self.layout.table)  # the table's creation
        self.commits = CatalogCommit(self.java.kind, self.layout.table)  # the hours' commits

    @classmethod
    def spark_conf(cls, settings: Settings) -> dict[str, str]:
        """Iceberg's catalog and runtime: the table's creation is Iceberg's Java library's."""
        return spark_catalog_conf(settings)

    @property
    def catalog(self) -> Catalog:
        with self._opening:  # the seal's warm-up thread may be opening it
            if self._catalog is None:
                self._catalog = open_catalog(self.settings)
            return self._catalog

    @property
    def identifier(self) -> str:
        return identifier(self.layout.table)

    def load(self) -> IcebergTable | None:
        """The table, or None before its first hour."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.identifier)
        except NoSuchTableError:
            return None
        except Exception as exc:  # a REST catalog's refusal or silence, by name
            raise self.java.kind.named(exc, f"loading {self.identifier}") from exc

    # -- publish ----------------------------------------------------------------------------
    def publish(self, metastore: Any, hour: Hour, specs: Specs, note: HourNote | None = None) -> None:
        self.commit_hour(hour, specs, note or HourNote(run_id="", batches={}))

    def warm_ups(self, metastore: Any) -> list[Callable[[], object]]:
        """pyiceberg's import and the catalog's table. Not Iceberg's Java catalog, even where
        the table is still to be created (its first seal, once: the main thread starts Spark
        for it), nor the Hive client (a late side table's registration starts it when it
        comes): no warm-up imports pyspark, so the seal need not import it before them."""
        return [self._warm_up]

    @without_pyspark
    def _warm_up(self) -> object:
        return self.load()

    def refresh(self, metastore: Any) -> None:
        """An Iceberg table has no cached listing: each read plans from its current snapshot."""

    def withdraw_before(self, metastore: Any, first_kept: Hour) -> list[str]:
        """One delete snapshot drops every file of the hours before ``first_kept``, planned
        again when another writer committed first (a retry finds none left and commits
        nothing)."""
        dropped: list[str] = []

        def drop(attempt: int) -> bool:
            iceberg = self.load()
            if iceberg is None:
                return True
            before = [task.file for task in iceberg.scan(row_filter=_hours_before(first_kept)).plan_files()]
            found = (_HOUR_PATH.search(data_file.file_path) for data_file in before)
            dropped[:] = sorted({match.group(1) for match in found if match})
            if before:
                self.commits.delete(iceberg, before, {"tidemark.retention": f"hours before {first_kept.key}"})
            return True

        self.until_landed(f"dropping the hours before {first_kept.key}", drop)
        return dropped

    def until_landed(self, what: str, step: Callable[[int], bool]) -> None:
        """``step(attempt)`` plans on the table's current snapshot and commits (True once there
        is nothing left to do); a commit that lost a race, or got no answer, is planned again,
        up to ``COMMIT_ATTEMPTS`` times, then ``HourCommitConflictError`` names ``what``."""
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                if step(attempt):
                    return
            except LostRaceError as exc:
                log.warning(
                    "%s: %s: the Iceberg commit %s (attempt %s of %s): %s; planning it again on the "
                    "table's current snapshot",
                    self.layout.table,
                    what,
                    "got no answer and may have landed" if exc.unknown else "lost a race with another writer",
                    attempt,
                    COMMIT_ATTEMPTS,
                    exc,
                )
        raise HourCommitConflictError(
            f"{self.layout.table}: {what}: {COMMIT_ATTEMPTS} Iceberg commits lost races with other writers "
            "of the table or got no answer from its catalog; none is in the table: retry the task"
        )

    def still_reads(self, directories: list[Path]) -> bool:
        """While a live snapshot still references a version of the dropped hours, time travel
        to it keeps their files until it expires (the maintenance DAG's expiry)."""
        live = self.live_locations()
        return any(loc.startswith(str(d)) for d in directories for loc in live)

    def referenced(self, metastore: Any) -> list[str]:
        """The directories of every file a live snapshot references (the metastore is not
        asked: it holds only the late side table)."""
        return self.live_locations()

    def snapshot_files(self) -> list[str]:
        iceberg = self.load()
        if iceberg is None or iceberg.current_snapshot() is None:
            return []
        return [
            self.relative_of(str(path)) for path in iceberg.inspect.files().column("file_path").to_pylist()
        ]

    def maintain(self, cutoff: datetime, *, dry_run: bool = False) -> MaintenanceResult:
        """Snapshots committed before ``cutoff`` expired, then the metadata only they used."""
        return expire(self, cutoff, dry_run=dry_run)

    def commit_hour(self, hour: Hour, specs: Specs, note: HourNote) -> None:
        """Replace the hour's data files by the version's in one snapshot (see the module)."""
        if not specs:  # data-derived partition columns and no rows: no partition to commit
            return
        files = [
            (spec, relative)
            for spec, leaf in specs
            for relative in self.store.files(self.layout.relative(leaf))
        ]
        directory = self._version_dir(specs[0][1])
        version, through = version_of(directory)
        summary = self._summary(hour, directory, version, through, note)
        added = [
            AddedFile(
                spec, self.file_location(self.layout.warehouse / relative), read_footer(self.store, relative)
            )
            for spec, relative in files
        ]
        schema = added[0].footer.schema if added else None

        def commit(attempt: int) -> bool:
            table = self.load()
            if table is None:
                if schema is None:
                    log.info(
                        "%s: hour %s has no rows, the table no snapshot yet", self.layout.table, hour.key
                    )
                    return True
                table = self._create(added[0], schema)
            if table is None:  # a creation refused as made concurrently, yet no table: again
                log.warning(
                    "%s: no Iceberg table after its creation (attempt %s)", self.layout.table, attempt
                )
                return False
            current = self._hour_files(table, hour)  # planned once per attempt
            if self._already(table, hour, current, directory=directory, version=version, through=through):
                return True
            self.commits.commit(
                table,
                remove=current,
                add=added,
                evolve_to=schema if schema is not None and needs_evolution(table, schema) else None,
                summary=summary,
            )
            log.info(
                "%s: hour %s v%s committed to Iceberg table %s.%s (%s files, batches %s)",
                self.layout.table,
                hour.key,
                version,
                self.settings.iceberg_catalog,
                self.identifier,
                len(files),
                sorted(note.batches) or "none",
            )
            return True

        self.until_landed(f"hour {hour.key} v{version}", commit)

    def _version_dir(self, leaf: Path) -> str:
        relative = self.layout.relative(leaf)
        return version_dir_of(f"{relative}/") or relative

    def _summary(
        self, hour: Hour, directory: str, version: int, through: int, note: HourNote
    ) -> dict[str, str]:
        summary = {
            "table": self.layout.table,
            "hour": hour.key,
            "version": str(version),
            "through-batch": str(through),
            "directory": directory,
            "run-id": note.run_id,
            "batches": json.dumps(
                {str(b): {str(p): r for p, r in ranges.items()} for b, ranges in note.batches.items()}
            ),
            "ready-time": note.ready_time or "",
            "processing-time": note.processing_time,
        }
        return {f"{PREFIX}{k}": v for k, v in summary.items()}

    def _already(
        self,
        table: IcebergTable,
        hour: Hour,
        current: list[DataFile],
        *,
        directory: str,
        version: int,
        through: int,
    ) -> bool:
        """Whether this version is the hour's commit already (a retry: True); refuses one
        older than the hour's last commit (a zombie or a raced step). ``current``: the hour's
        data files in the table now."""
        last = last_hour_commit(table, hour.key) or self._from_files(current)
        if last is None:
            return False
        if last.get(f"{PREFIX}directory") == directory:
            log.info(
                "%s: hour %s v%s is already the table's (snapshot summary): not committed again",
                self.layout.table,
                hour.key,
                version,
            )
            return True
        known = (int(last[f"{PREFIX}version"]), int(last[f"{PREFIX}through-batch"]))
        if known > (version, through):
            raise HourCommitConflictError(
                f"{self.layout.table} hour {hour.key}: the Iceberg table already holds v{known[0]} through batch "
                f"{known[1]} (run {last.get(f'{PREFIX}run-id')}), newer than v{version} through batch {through} "
                f"this step wrote in {directory}: committed nothing (a paused or raced step)"
            )
        return False

    def _from_files(self, current: list[DataFile]) -> dict[str, str] | None:
        """The hour's last commit read from its current files' version directory, where its
        snapshot has expired (maintenance): what a summary would say of it, minus the run."""
        for data_file in current:
            directory = version_dir_of(self.relative_of(data_file.file_path))
            if directory:
                version, through = version_of(directory)
                return {
                    f"{PREFIX}directory": directory,
                    f"{PREFIX}version": str(version),
                    f"{PREFIX}through-batch": str(through),
                }
        return None

    def _hour_files(self, table: IcebergTable, hour: Hour) -> list[DataFile]:
        where = " AND ".join(f"{k} = '{v}'" for k, v in hour.spec.items())  # dt, hr: digits
        return [task.file for task in table.scan(row_filter=where).plan_files()]

    def _create(self, first: AddedFile, schema: pa.Schema) -> IcebergTable | None:
        """The table, created from its first hour's files: their columns, then identity
        partitions by ``dt``, ``hr`` and the data-derived columns. None when it is not there
        after all (Iceberg reports a refused creation as one made concurrently)."""
        return self.create(table_schema(schema, first.values), list(first.values))

    def create(self, schema: pa.Schema, partitions: list[str]) -> IcebergTable | None:
        """Create the table with ``schema``, identity partitions by ``partitions`` (by the
        first hour's commit; or ahead of it, as ``bench/pipeline.py`` prepares a table: an
        hour whose files bring more or wider columns evolves it). Spark's Iceberg runtime
        creates it: the job's session starts here, once per table."""
        self.java.create(
            self.identifier,
            schema,
            partitions,
            self.file_location(self.layout.table_dir),
            # a commit that lost a race is planned again here (the hour's files read anew
            # from the winner's snapshot), not replayed by the library's own retry
            {"format-version": "2", "commit.retry.num-retries": "0", f"{PREFIX}table": self.layout.table},
        )
        log.info(
            "%s: created Iceberg table %s.%s at %s",
            self.layout.table,
            self.settings.iceberg_catalog,
            self.identifier,
            self.file_location(self.layout.table_dir),
        )
        return self.load()

    def file_location(self, path: Path) -> str:
        """A warehouse path as the table's metadata names it: ``file://`` and the path as it is
        on local disk (not percent-encoded: readers take ``dt=...`` literally)."""
        return self.layout.location(path) if self.store.object_store else f"file://{path}"

    def relative_of(self, location: str) -> str:
        """A location the table's metadata names, warehouse-relative ("" outside it)."""
        return self.layout.store_relative(location)

    # -- collect ----------------------------------------------------------------------------
    def live_locations(self) -> list[str]:
        """The directories of every data file a snapshot still references (expired ones no
        longer count), as the collector reads locations."""
        table = self.load()
        if table is None:
            return []
        found: set[str] = set()
        for snapshot in table.snapshots():
            for manifest in snapshot.manifests(table.io):
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    found.add(entry.data_file.file_path.rsplit("/", 1)[0])
        return sorted(local_path(p) for p in found)  # as the collector reads locations


def _hours_before(hour: Hour) -> str:
    """The row filter of every hour before ``hour`` (dates and hour labels, compared as text
    in time order: no quote to escape)."""
    return f"dt < '{hour.dt}' or (dt = '{hour.dt}' and hr < '{hour.hr}')"
