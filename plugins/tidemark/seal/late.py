"""Late rows: records of hours sealed before their batch was planned.

``side_table`` registers every hour with late rows as a partition of ``<table>__late``;
``amend`` folds the late rows not yet in a sealed hour into it as a new version of its files
(one rename per file: readers see the old version or the new one), which re-announces it. The
late files it folded are deleted once the amend's journal entry is written (and by the next
amend, after a kill between the two): a row lives in one place, so no later registration of
``<table>__late``, policy change or listing of the warehouse can read it twice. A rebuild
re-reads the hour's batches from the topic, never the late files.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.errors import ReconciliationError
from tidemark.faults import crash_point
from tidemark.seal.hourfiles import HourFiles, step_entry
from tidemark.seal.versions import write_version_once
from tidemark.state.commitlog import LogState
from tidemark.state.journal import EntryKind, HourJournal, JournalEntry, JournalState
from tidemark.state.layout import batch_of_file, sealed_file_prefix
from tidemark.state.storage import Location, read_json, replace_atomically
from tidemark.time.hours import Hour, parse_path

if TYPE_CHECKING:
    from tidemark.state.locks import Lease

log = logging.getLogger(__name__)


class LateRows:
    """The late rows of one table, by its ``late_policy``."""

    def __init__(
        self,
        files: HourFiles,
        run_id: str,
        fence: Callable[[], None] = lambda: None,
        lease: Lease | None = None,
    ) -> None:
        self.files = files
        self.lease = lease  # owns the version directories it writes
        self.fence = fence  # the lease check before every step that makes rows visible
        self.config = files.config
        self.layout = files.layout
        self.run_id = run_id
        self.zone = self.config.event_time.time_zone

    def hours(self, state: LogState) -> list[Hour]:
        return sorted(parse_path(p, self.zone) for p, n in state.late_per_hour.items() if n)

    def register(self, state: LogState, journal: HourJournal) -> list[str]:
        """side_table: every hour with late rows is a partition of <table>__late, with a
        partition per value of the data-derived partition columns. An hour is registered again
        whenever its late count grew (later late rows may bring new values; on an object store
        the partition then points at a new version of its files)."""
        recorded = read_json(self.registry_file(journal)) or {}
        stored = recorded.get("hours", {})
        registered: dict[str, int] = stored if isinstance(stored, dict) else {}  # older: a list of keys
        locations: dict[str, str] = dict(recorded.get("locations", {}))
        todo = [h for h in self.hours(state) if registered.get(h.key) != state.late_per_hour[h.path]]
        if not todo:
            return []
        late_table = self.config.late_table
        for hour in todo:
            if self.layout.object_store:
                target = self._late_version(hour, state)
                locations[hour.key] = self.layout.relative(target)
            else:
                target = self.layout.late_dir / hour.path
            self.fence()
            self.files.register(late_table, self.layout.late_dir, hour, target)
            registered[hour.key] = state.late_per_hour[hour.path]
        crash_point("after_late_registration")
        self.fence()
        record: dict[str, object] = {"hours": dict(sorted(registered.items()))}
        if locations:
            record["locations"] = dict(sorted(locations.items()))
        replace_atomically(self.registry_file(journal), record)
        return [h.key for h in todo]

    @staticmethod
    def registry_file(journal: HourJournal) -> Location:
        return journal.root / "late_registered.json"

    def locations(self, journal: HourJournal) -> dict[str, str]:
        """Object stores: the version directory each late partition points at."""
        return dict((read_json(self.registry_file(journal)) or {}).get("locations", {}))

    def _amend_in_place(
        self, hour: Hour, current: JournalEntry | None, new_files: list[Path], version: int, through: int
    ) -> tuple[Path, list[str], int]:
        """Object stores: the hour's current files and its new late rows written once as the
        hour's next version directory (the whole hour: a registered directory never changes),
        which the partition is then pointed at. Returns (directory, files, late rows added)."""
        store = self.layout.store
        named = self.layout.hour_version(hour.path, version, through)
        before = current.rows if current else 0

        def rewrite(directory: str) -> list[tuple[str, int]]:
            home = self.layout.warehouse / directory
            inputs = [*(self.layout.warehouse / f for f in (current.files if current else ())), *new_files]
            late = sum(store.rows(self.layout.relative(p)) for p in new_files)
            size = sum(store.size(self.layout.relative(p)) for p in inputs)
            n_files = self.config.output.files_for(size)
            written = self.files.write_version(
                self.files.read_hour(home, inputs), home, sealed_file_prefix(1), n_files
            )
            rows = sum(n for _, n in written)
            if rows != before + late:
                raise ReconciliationError(
                    f"{self.config.table} hour {hour.key}: amend to v{version} wrote {rows} rows != {before} "
                    f"sealed + {late} late rows of batches <= {through}; not registered"
                )
            return written

        written = write_version_once(store, self.layout.relative(named), rewrite, self.lease)
        return self.layout.warehouse / written.directory, written.files, written.rows - before

    def _late_version(self, hour: Hour, state: LogState) -> Path:
        """Object stores: the committed late rows of an hour (hidden batch files in
        ``<table>__late/_open``) written once as a new directory of the late partition, named by
        its rows and last batch; the partition is then pointed at it, so readers never see a
        late file before its batch commits, nor half a version."""
        store = self.layout.store
        count = state.late_per_hour[hour.path]
        named = self.layout.versioned_hour(self.layout.late_dir, hour.path, count, state.last_committed)

        def gather(directory: str) -> list[tuple[str, int]]:
            home = self.layout.warehouse / directory
            inputs = self.files.batch_files(
                self.layout.late_open_dir / hour.path, through=state.last_committed
            )
            written = self.files.write_version(self.files.read_hour(home, inputs), home, "part", 1)
            rows = sum(n for _, n in written)
            if rows != count:
                raise ReconciliationError(
                    f"{self.config.late_table} hour {hour.key}: {rows} late rows in the batch files != {count} "
                    f"committed by batches <= {state.last_committed}; not registered"
                )
            return written

        written = write_version_once(store, self.layout.relative(named), gather, self.lease)
        return self.layout.warehouse / written.directory

    def _drop_folded(self, late_dir: Path, through: int) -> None:
        """Delete the late files of batches <= ``through``: the hour's version holds their rows."""
        folded = self.files.batch_files(late_dir, through=through)
        if not folded:
            return
        self.fence()
        store = self.layout.store
        for path in folded:
            store.delete(self.layout.relative(path))
        log.info("%s: deleted %s late files folded into %s", self.config.table, len(folded), late_dir)

    def amend(self, state: LogState, partitions: JournalState, journal: HourJournal) -> list[JournalEntry]:
        """amend: fold late rows not yet in a sealed partition into it as a new file version."""
        entries: list[JournalEntry] = []
        for hour in self.hours(state):
            current = partitions.hours.get(hour.key)
            if current is not None and current.quarantined:
                continue  # its late rows wait for the release
            folded = current.folded_through_batch if current else -1
            late_dir = (
                self.layout.late_open_dir if self.layout.object_store else self.layout.late_dir
            ) / hour.path
            self._drop_folded(late_dir, folded)  # a kill after the last amend's journal entry
            new_files = self.files.batch_files(late_dir, through=state.last_committed, after=folded)
            if not new_files:
                continue
            version = (current.version if current else 0) + 1
            through = max(batch_of_file(p.name) or 0 for p in new_files)
            if self.layout.object_store:
                target, files, added = self._amend_in_place(hour, current, new_files, version, through)
            else:
                target = self.layout.table_dir / hour.path
                staging = self.layout.step_staging("amend", hour.key, f"v{version}")
                shutil.rmtree(staging, ignore_errors=True)
                frame = self.files.read_hour(late_dir, new_files)
                self.files.write_staged(frame.coalesce(1), staging)  # the table's format
                added = self.files.staged_rows(staging)
                # One rename per file: readers see the old version or the new one, never half.
                self.fence()
                files = [
                    *(current.files if current else ()),
                    *self.files.move_staged(staging, target, sealed_file_prefix(version)),
                ]
            crash_point("after_amend_files")
            self.fence()
            self.files.register(self.config.table, self.layout.table_dir, hour, target)
            self.files.spark.catalog.refreshTable(self.config.table)
            rows = (current.rows if current else 0) + added
            self.files.mark_complete(target, hour, rows, version)
            crash_point("after_amend_moves")
            entry = step_entry(
                self.config,
                self.run_id,
                hour,
                state,
                partitions,
                kind=EntryKind.AMEND,
                version=version,
                rows=rows,
                files=files,
                quality=current.quality if current else {},
                late=(current.late if current else 0) + added,
                folded_through_batch=through,
                seq=partitions.last_seq + 1 + len(entries),  # the caller applies them after
                schema_version=self.files.schema_version(self.run_id),
            )
            self.fence()
            journal.append(entry)
            crash_point("after_amend_entry")
            self._drop_folded(late_dir, through)
            log.info(
                "%s: hour %s amended to version %s with %s late rows of batches %s..%s",
                self.config.table,
                hour.key,
                version,
                added,
                folded + 1,
                through,
            )
            entries.append(entry)
        return entries
