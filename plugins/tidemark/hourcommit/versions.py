"""Versions of registered partitions on an object store, and collecting the replaced ones.

On an object store a registered partition never changes in place: a step writes a new
directory (``Layout.versioned_hour``) and points the partition at it, so a query that listed
the old directory keeps reading a complete version. A replaced directory (a late partition
that grew, an hour compacted again after a failed seal, a crashed attempt's leftovers) is
deleted once it has been unreferenced for ``output.version_retention`` of the pipeline's
processing time (the commit log's, never the machine's clock): the first seal that finds it
unreferenced records when, a later one deletes it, once the retention has also passed on the
wall clock. A directory has an owner: the lease of the step writing it (``claim_version``);
no other step writes into it, and the collector leaves it alone while that lease lives.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import VersionConflictError
from tidemark.state.commitlog import LogState
from tidemark.state.journal import HourJournal, JournalEntry, JournalState
from tidemark.state.layout import COMPACTED_MARKER, Layout, version_dir_of
from tidemark.state.locks import TableLock
from tidemark.state.storage import Location, create_only, read_json, replace_atomically
from tidemark.tablefs import Store
from tidemark.time.hours import parse_key
from tidemark.time.instants import parse_instant

if TYPE_CHECKING:
    from tidemark.state.locks import Lease

log = logging.getLogger(__name__)

OWNER_RECORD = "_tidemark_owner.json"  # the lease writing a version directory (created first)


@dataclass(frozen=True)
class WrittenVersion:
    """The files (warehouse-relative) and rows of a version directory; ``reused`` when an
    earlier attempt had already completed it."""

    files: list[str]
    rows: int
    reused: bool = False
    directory: str = ""  # warehouse-relative: the one written or reused


def owner_live(owner: dict[str, Any] | None) -> bool:
    """Whether the lease an owner record names is still its lock's live holder."""
    if not owner or "lock_root" not in owner:
        return False

    return TableLock.at(Location(owner["lock_root"])).holds(int(owner["token"]))


def claim_version(store: Store, directory: str, lease: Lease | None) -> str:
    """Make ``lease`` the owner of a version directory before anything is written into it, and
    return the directory to write: ``directory`` when it has no owner (an owner record created
    only if absent: a conditional PUT on S3) or is this lease's own. A directory owned by
    another live lease (a rebuild and an amend naming the same next version) is never touched:
    VersionConflictError. A dead owner's directory is never emptied either (its Spark tasks may
    still be writing into it): this lease writes a sibling of its own name instead
    (``<directory>-<owner>``), which the journal entry's files name, and the collector deletes
    the dead one's once it is unreferenced for the retention."""
    if lease is None:
        store.delete_dir(directory)
        return directory

    me = {"lock_root": lease.lock.root.uri, "token": lease.token, "run_id": lease.record.run_id}
    owner = read_json(Location(store.uri(f"{directory}/{OWNER_RECORD}")))
    if owner is not None and not _same_owner(owner, me):
        if owner_live(owner):
            raise VersionConflictError(
                f"{directory} is being written by run {owner.get('run_id')} (lock {owner['lock_root']}, token "
                f"{owner['token']}); this step wrote nothing there and can be retried once that one ended"
            )
        log.info(
            "%s: its writer (run %s, token %s) is gone; writing a directory of this run's own",
            directory,
            owner.get("run_id"),
            owner.get("token"),
        )
        directory = f"{directory}-{owner_suffix(me)}"
    record = Location(store.uri(f"{directory}/{OWNER_RECORD}"))
    if not create_only(record, me) and not _same_owner(read_json(record) or {}, me):
        raise VersionConflictError(f"{directory}: another writer claimed it at the same moment; retry")
    for leftover in store.all_files(directory):  # an unowned crashed attempt's (older releases)
        if not leftover.endswith(f"/{OWNER_RECORD}"):
            store.delete(leftover)
    return directory


def _same_owner(owner: dict[str, Any], me: dict[str, Any]) -> bool:
    return owner.get("lock_root") == me["lock_root"] and owner.get("token") == me["token"]


def owner_suffix(owner: dict[str, Any]) -> str:
    """Eight characters naming a lease (its lock and token), for a directory it writes."""
    return hashlib.sha256(f"{owner['lock_root']}\n{owner['token']}".encode()).hexdigest()[:8]


def _completed(store: Store, directory: str) -> tuple[str, dict[str, Any]] | None:
    """A complete version of ``directory``'s content (a marker, and every file it names): its
    own, or a sibling's that a writer taking over from a dead one wrote (``<directory>-<owner>``)."""
    parent, _, name = directory.rpartition("/")
    present = set(store.all_files(parent))
    markers = sorted(p for p in present if p.endswith(f"/{COMPACTED_MARKER}"))
    candidates = [m.rpartition("/")[0] for m in markers]
    ordered = sorted(c for c in candidates if c == directory or c.rpartition("/")[2].startswith(f"{name}-"))
    for candidate in sorted(ordered, key=lambda c: c != directory):  # its own name first
        done = store.read_json(f"{candidate}/{COMPACTED_MARKER}")
        if done is not None and set(done["files"]) <= present:
            return candidate, done  # whole: a marker whose files were deleted is not complete
    return None


def completed_version(store: Store, directory: str) -> WrittenVersion | None:
    """A complete version of ``directory`` (or of a sibling a writer taking over from a dead
    one wrote), reused as it is; None if there is none yet."""
    complete = _completed(store, directory)
    if complete is None:
        return None
    found, done = complete
    return WrittenVersion(list(done["files"]), int(done["rows"]), reused=True, directory=found)


def write_version_once(
    store: Store,
    directory: str,
    write: Callable[[str], list[tuple[str, int]]],
    lease: Lease | None = None,
) -> WrittenVersion:
    """A version directory is written once and never changed: a directory whose marker exists
    is complete and reused (a retry after a kill); one without is an attempt's in progress or
    a crashed one's, never pointed at. ``lease`` claims it (:func:`claim_version`, which may
    name a sibling of its own), and ``write(directory)`` writes it (returning (file, rows) of
    what it wrote; raising when its rows do not reconcile). The marker goes last."""
    done = completed_version(store, directory)
    if done is not None:
        return done
    directory = claim_version(store, directory, lease)
    return mark_version(store, directory, write(directory))


def mark_version(store: Store, directory: str, written: list[tuple[str, int]]) -> WrittenVersion:
    """Mark a claimed version directory complete with what was written into it: its marker
    (files and rows) goes last, once every file is there."""
    version = WrittenVersion(
        [path for path, _ in written], sum(rows for _, rows in written), directory=directory
    )
    store.write_json(f"{directory}/{COMPACTED_MARKER}", {"files": version.files, "rows": version.rows})
    return version


def entry_directory(layout: Layout, hour_path: str, entry: JournalEntry) -> str:
    """The version directory (warehouse-relative) a journal entry's hour points at: the one its
    files lie in (a writer that took over a dead one's wrote under a name of its own), else
    the name of its version and last batch (an hour without rows)."""
    found = version_dirs(list(entry.files))
    if len(found) == 1:
        return found.pop()
    return layout.relative(layout.hour_version(hour_path, entry.version, entry.folded_through_batch))


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
            current.add(entry_directory(self.layout, parse_key(key, zone).path, entry))
        return current

    def collect(
        self,
        state: LogState,
        partitions: JournalState,
        late_locations: dict[str, str],
        registered: Sequence[str] = (),
        wall: datetime | None = None,
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
            wall=wall,
        )


def _first_seen(recorded: Any, now: datetime, wall: datetime) -> dict[str, str]:
    """When a directory was first seen unreferenced, in processing time and wall-clock time
    (a record of an older release holds the processing time only: its wall clock starts now)."""
    if isinstance(recorded, dict):
        return {"processing": str(recorded["processing"]), "wall": str(recorded["wall"])}
    return {"processing": str(recorded or now.isoformat()), "wall": wall.isoformat()}


def collect_unreferenced(
    store: Store,
    record: Location,
    *,
    scope: str | list[str],
    current: set[str],
    now: datetime,
    retention: timedelta,
    owner: str,
    wall: datetime | None = None,
) -> list[str]:
    """The version directories under ``scope`` that are not ``current``: record when each was
    first seen unreferenced (in ``record``, a state file), delete those unreferenced for
    ``retention`` both by ``now`` (processing time, which an outage moves by a day at once)
    and by the wall clock (a query that listed a version keeps it for ``retention`` of real
    time). A directory whose owner lease is live is being written: never recorded nor
    deleted. Returns the directories deleted."""
    bases = [scope] if isinstance(scope, str) else scope
    present: set[str] = set()
    for base in bases:
        present |= version_dirs(store.all_files(base))
    unreferenced = present - current
    wall = wall or datetime.now(UTC)  # the second bound: readers' real time, whatever processing time did
    everything = dict((read_json(record) or {}).get("replaced", {}))
    # a record may be shared by several scopes: those of the others are kept as they are
    recorded = {d: t for d, t in everything.items() if any(d.startswith(f"{b}/") for b in bases)}
    others = {d: t for d, t in everything.items() if d not in recorded}
    in_flight = {d for d in unreferenced if owner_live(store.read_json(f"{d}/{OWNER_RECORD}"))}
    since = {d: _first_seen(recorded.get(d), now, wall) for d in sorted(unreferenced) if d not in in_flight}
    deleted = []
    for directory, first_seen in since.items():
        processing, seen_wall = first_seen["processing"], first_seen["wall"]
        if (
            datetime.fromisoformat(processing) + retention <= now
            and datetime.fromisoformat(seen_wall) + retention <= wall
        ):
            store.delete_dir(directory)
            deleted.append(directory)
    if in_flight:
        log.info(
            "%s: kept %s version directories being written: %s", owner, len(in_flight), sorted(in_flight)
        )
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
