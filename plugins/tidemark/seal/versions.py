"""Versions of registered partitions on an object store, and collecting the replaced ones.

On an object store a registered partition never changes in place: a step writes a new
directory (``Layout.versioned_hour``) and points the partition at it, so a query that listed
the old directory keeps reading a complete version. A replaced directory (a late partition
that grew, an hour compacted again after a failed seal, a crashed attempt's leftovers) is
deleted once it has been unreferenced for ``output.version_retention`` of the pipeline's
processing time (the commit log's, never the machine's clock): the first seal that finds it
unreferenced records when, a later one deletes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tidemark.config import TableConfig
from tidemark.state.commitlog import LogState
from tidemark.state.journal import HourJournal, JournalState
from tidemark.state.layout import COMPACTED_MARKER, Layout, version_dir_of
from tidemark.state.storage import Location, read_json, replace_atomically
from tidemark.tablefs import Store
from tidemark.time.hours import parse_key
from tidemark.time.instants import parse_instant

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WrittenVersion:
    """The files (warehouse-relative) and rows of a version directory; ``reused`` when an
    earlier attempt had already completed it."""

    files: list[str]
    rows: int
    reused: bool = False


def write_version_once(
    store: Store, directory: str, write: Callable[[], list[tuple[str, int]]]
) -> WrittenVersion:
    """A version directory is written once and never changed: a directory whose marker exists
    is complete and reused (a retry after a kill); one without is a crashed attempt's, never
    pointed at, and is emptied and written again by ``write`` (which returns (file, rows) of
    what it wrote, and raises when its rows do not reconcile). The marker goes last."""
    done = store.read_json(f"{directory}/{COMPACTED_MARKER}")
    if done is not None:
        return WrittenVersion(list(done["files"]), int(done["rows"]), reused=True)
    store.delete_dir(directory)
    written = write()
    version = WrittenVersion([path for path, _ in written], sum(rows for _, rows in written))
    store.write_json(f"{directory}/{COMPACTED_MARKER}", {"files": version.files, "rows": version.rows})
    return version


def version_dirs(files: list[str]) -> set[str]:
    """The version directories the given warehouse-relative files lie in."""
    return {d for f in files if (d := version_dir_of(f)) is not None}


class VersionCollector:
    """Finds the version directories of one table (and its late table) no partition points
    at, and deletes those unreferenced for longer than the retention."""

    def __init__(self, config: TableConfig, layout: Layout, journal: HourJournal) -> None:
        self.config = config
        self.layout = layout
        self.journal = journal
        self.record = journal.root / "replaced_versions.json"

    def current(self, partitions: JournalState, late_locations: dict[str, str]) -> set[str]:
        """Directories a partition points at (or will, for a quarantined hour)."""
        zone = self.config.event_time.time_zone
        current = set(late_locations.values())
        for key, entry in partitions.hours.items():
            hour = parse_key(key, zone)
            directory = self.layout.hour_version(hour.path, entry.version, entry.folded_through_batch)
            current.add(self.layout.relative(directory))
        return current

    def collect(
        self,
        state: LogState,
        partitions: JournalState,
        late_locations: dict[str, str],
        registered: Sequence[str] = (),
    ) -> list[str]:
        """Record newly unreferenced directories; delete those past the retention. Returns the
        directories deleted. ``registered``: the locations the metastore points at now (kept
        whatever the journal says: a step killed after its switch and before its journal
        entry points a partition at a directory the journal does not name yet)."""
        now = parse_instant(state.ready.processing_time) if state.ready else None
        if now is None:
            return []
        # a partition of a data-derived value points into its version: .../_v0002-b../app=web
        relative = [self.layout.store_relative(location) for location in registered]
        pointed = {version_dir_of(f"{r}/") or r for r in relative if r}
        return collect_unreferenced(
            self.layout.store,
            self.record,
            scope=[self.layout.relative(self.layout.table_dir), self.layout.relative(self.layout.late_dir)],
            current=self.current(partitions, late_locations) | pointed,
            now=now,
            retention=self.config.output.version_retention,
            owner=self.config.table,
        )


def collect_unreferenced(
    store: Store,
    record: Location,
    *,
    scope: str | list[str],
    current: set[str],
    now: datetime,
    retention: timedelta,
    owner: str,
) -> list[str]:
    """The version directories under ``scope`` that are not ``current``: record when each was
    first seen unreferenced (in ``record``, a state file), delete those unreferenced for
    ``retention`` by ``now`` (processing time). Returns the directories deleted."""
    bases = [scope] if isinstance(scope, str) else scope
    present: set[str] = set()
    for base in bases:
        present |= version_dirs(store.all_files(base))
    unreferenced = present - current
    everything = dict((read_json(record) or {}).get("replaced", {}))
    # a record may be shared by several scopes: those of the others are kept as they are
    recorded = {d: t for d, t in everything.items() if any(d.startswith(f"{b}/") for b in bases)}
    others = {d: t for d, t in everything.items() if d not in recorded}
    since = {d: recorded.get(d, now.isoformat()) for d in sorted(unreferenced)}
    deleted = []
    for directory, first_seen in since.items():
        if datetime.fromisoformat(first_seen) + retention <= now:
            store.delete_dir(directory)
            deleted.append(directory)
    kept = {d: t for d, t in since.items() if d not in deleted}
    if kept != recorded:
        replace_atomically(record, {"replaced": {**others, **kept}})
    if deleted:
        log.info(
            "%s: deleted %s replaced versions unreferenced for over %s: %s",
            owner,
            len(deleted),
            retention,
            deleted,
        )
    return deleted
