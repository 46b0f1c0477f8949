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
from pathlib import Path

from tidemark.errors import ReconciliationError
from tidemark.faults import crash_point
from tidemark.hourcommit.base import Writer
from tidemark.hourcommit.versions import VersionCollector
from tidemark.seal.hourfiles import HourFiles, step_entry
from tidemark.state.commitlog import LogState
from tidemark.state.journal import EntryKind, HourJournal, JournalEntry, JournalState
from tidemark.state.layout import batch_of_file
from tidemark.state.storage import Location, read_json, replace_atomically
from tidemark.time.hours import Hour, parse_path

log = logging.getLogger(__name__)


class LateRows:
    """The late rows of one table, by its ``late_policy``."""

    def __init__(self, files: HourFiles, writer: Writer) -> None:
        self.files = files
        self.writer = writer  # owns the version directories it writes; checked before rows show
        self.config = files.config
        self.layout = files.layout
        self.run_id = writer.run_id
        self.zone = self.config.event_time.time_zone
        self.inputs, self.versions = files.inputs, files.versions

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
        kept_from = recorded.get("kept_from")  # retention.late: hours before it never come back
        todo = [
            h
            for h in self.hours(state)
            if registered.get(h.key) != state.late_per_hour[h.path]
            and (kept_from is None or h.start.isoformat() >= kept_from)
        ]
        if not todo:
            return []
        for hour in todo:
            target, location = self.inputs.late_partition(hour, state, self.files, self.writer)
            if location is not None:
                locations[hour.key] = location
            self.writer.check()
            self.files.register(hour, target, late=True)
            registered[hour.key] = state.late_per_hour[hour.path]
        crash_point("after_late_registration")
        self.writer.check()
        record: dict[str, object] = {**recorded, "hours": dict(sorted(registered.items()))}
        if locations:
            record["locations"] = dict(sorted(locations.items()))
        replace_atomically(self.registry_file(journal), record)
        return [h.key for h in todo]

    def collect_versions(self, state: LogState, partitions: JournalState, journal: HourJournal) -> list[str]:
        """The table's and its late table's versions no partition points at, deleted past the
        retention (object stores and ``output.layout: versioned`` keep them so long: a query
        may still list one); the metastore's locations count as pointed at. Returns those
        deleted. The seal runs it, and the maintenance DAG's compact step for a table whose
        seals have stopped."""
        if not self.versions.own_directories:
            return []  # a version exchanged in place leaves with its writer's scratch
        self.writer.check()  # a zombie's collection would judge by a journal another holder moved on
        referenced = self._referenced()
        if referenced is None:
            log.warning(
                "%s: no version collected this run (the fresh read's locations unknown)", self.config.table
            )
            return []
        return VersionCollector(self.config, self.layout, journal).collect(
            state, partitions, self.locations(journal), referenced
        )

    def _referenced(self) -> list[str] | None:
        """What readers are pointed at now: the table's publication's, the late side table's
        partitions (a publication outside the metastore asks it, starting its client, only when
        the late side table has files) and the fresh read's; None where that is unknown now."""
        metastore = self.files.metastore
        late = self.files.publication.in_metastore or bool(
            self.layout.store.all_files(self.layout.relative(self.layout.late_dir))
        )
        fresh = self.files.fresh.referenced()
        if fresh is None:
            return None
        return [
            *self.files.publication.referenced(metastore),
            *(self.files.late_publication.referenced(metastore) if late else []),
            *fresh,
        ]

    @staticmethod
    def registry_file(journal: HourJournal) -> Location:
        return journal.root / "late_registered.json"

    def locations(self, journal: HourJournal) -> dict[str, str]:
        """Object stores: the version directory each late partition points at."""
        return dict((read_json(self.registry_file(journal)) or {}).get("locations", {}))

    def _drop_folded(self, late_dir: Path, through: int) -> None:
        """Delete the late files of batches <= ``through``: the hour's version holds their rows."""
        folded = self.files.batch_files(late_dir, through=through)
        if not folded:
            return
        self.writer.check()
        store = self.layout.store
        for path in folded:
            store.delete(self.layout.relative(path))
        log.info("%s: deleted %s late files folded into %s", self.config.table, len(folded), late_dir)

    def _amended(
        self, hour: Hour, current: JournalEntry | None, new_files: list[Path], *, version: int, through: int
    ) -> tuple[Path, list[str], int]:
        """Late batch files folded into the hour as its next version, ready to register:
        beside its files (``Draft.appends``: their rows only, moved in one rename each) or as
        the whole hour written once in a directory of its own; returns (where the hour is
        read, its files, late rows added). A retry reuses a complete version."""
        draft = self.versions.draft(hour, "amend", version=version, through=through, writer=self.writer)
        before, kept = (current.rows, list(current.files)) if current else (0, [])
        if draft.done is not None:
            return draft.directory, draft.done.files, draft.done.rows - before
        store, warehouse = self.layout.store, self.layout.warehouse
        base = [] if draft.appends else [warehouse / f for f in kept]
        late = sum(store.rows(self.layout.relative(p)) for p in new_files)
        size = sum(store.size(self.layout.relative(p)) for p in [*base, *new_files])
        n_files = 1 if draft.appends else self.config.output.files_for(size)
        read_from = self.inputs.late_inputs(hour) if draft.appends else draft.directory
        frame = self.files.read_hour(read_from, [*base, *new_files])
        written = self.versions.write(draft, frame, n_files, files=self.files)
        rows = sum(n for _, n in written)
        if rows != late + (0 if draft.appends else before):
            raise ReconciliationError(
                f"{self.config.table} hour {hour.key}: amend to v{version} wrote {rows} rows != "
                f"{0 if draft.appends else before} sealed + {late} late rows of batches <= {through}; "
                "not registered"
            )
        files, target = self.versions.complete(draft, written, self.writer)
        return target, [*kept, *files] if draft.appends else files, rows - (0 if draft.appends else before)

    def amend(self, state: LogState, partitions: JournalState, journal: HourJournal) -> list[JournalEntry]:
        """amend: fold late rows not yet in a sealed partition into it as a new file version."""
        entries: list[JournalEntry] = []
        for hour in self.hours(state):
            if partitions.dropped_by_retention(hour.start):
                continue  # dropped by retention: its late rows go with it (tidemark.retention)
            current = partitions.hours.get(hour.key)
            if current is not None and current.quarantined:
                continue  # its late rows wait for the release
            folded = current.folded_through_batch if current else -1
            late_dir = self.inputs.late_inputs(hour)
            if current is None or self.files.fresh.deletable(current):  # the fresh read's grace
                self._drop_folded(late_dir, folded)  # a kill after the last amend's journal entry
            new_files = self.files.batch_files(late_dir, through=state.last_committed, after=folded)
            if not new_files:
                continue
            version = (current.version if current else 0) + 1
            through = max(batch_of_file(p.name) or 0 for p in new_files)
            target, files, added = self._amended(hour, current, new_files, version=version, through=through)
            crash_point("after_amend_files")
            self.writer.check()
            self.files.register(hour, target)
            self.files.refresh()
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
            self.writer.check()
            journal.append(entry)
            crash_point("after_amend_entry")
            if self.files.fresh.immediate:  # else by a later run, past the fresh read's grace
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
