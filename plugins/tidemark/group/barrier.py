"""The cross-table barrier: a group's hour is announced, as one event of the group's Asset with
the hour as partition key, only once every table of the group has published it.

An hour H of the group is complete when every table's sealed frontier has passed H's end and
no table holds H back (quarantined). A table with no entry for H had no rows in it (its data
started later). Each complete hour has a digest of its tables' versions: an amend of any table
changes it, and the hour is announced again, as a table's amended hour is.

Exactly once, the table announce's way (``tidemark.seal.announce``): Airflow keeps a task's
events only when it succeeds, so the task reads the group asset's recent events and emits only
(hour, digest) pairs Airflow does not hold yet; pairs seen there are recorded as confirmed in
``<state>/_groups/<group>/announced.json``, which keeps the next run's work small.

Membership changes never announce an hour falsely or twice. A member whose config fails to load
(a typo in its YAML) or disagrees with its group *holds* the barrier: nothing is announced
until it is mended (its hours may not be published, so no hour can be said to be complete).
A table that leaves the group does not re-announce its hours: an hour is announced again only
when a table still in it has a newer version of it than was announced (an amend), or a table
that joined has one.

The record stays small: it keeps the newest ``KEEP_HOURS`` confirmed hours. Older ones are
folded into ``settled``: the first kept hour and, per table, the last journal sequence number
of the folded hours' entries. An hour before it counts as announced until a table writes a
newer entry for it (an amend: its sequence number is higher) or a table that was not there
has one.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.catalog import table_configs
from tidemark.faults import crash_point
from tidemark.group.members import group_asset, group_members, group_state_dir, unloadable_members
from tidemark.group.roster import roster_holds
from tidemark.seal.announce import LOOKBACK_SLACK, announced_pairs
from tidemark.seal.due import seal_limit, unfinished_hours
from tidemark.state.journal import JournalState
from tidemark.state.storage import Location, read_json, replace_atomically
from tidemark.table import Table

if TYPE_CHECKING:
    from tidemark.config import TableConfig
    from tidemark.settings import Settings

log = logging.getLogger(__name__)

KEEP_HOURS = 24 * 35  # confirmed hours kept by name in announced.json (see the module)


def complete_hours(
    journals: Mapping[str, JournalState],
    retired: frozenset[str] = frozenset(),
    quiet: Mapping[str, str] | None = None,
) -> dict[str, dict[str, int]]:
    """Hour -> {table: version} of every hour all the tables have published (see the module).
    A ``retired`` table (its topic is gone and every hour up to its last record is published:
    ``finished_retired``) never seals another hour: it holds no frontier, its published hours still count (a retired table that never sealed
    anything holds nothing either). ``quiet``: the frontier of each table that has committed
    batches but never a row (its ready time: it has nothing to seal before it, so it would
    otherwise hold every hour of the group forever)."""
    quiet = quiet or {}
    frontiers = [s.sealed_through or quiet.get(t) for t, s in journals.items() if t not in retired]
    if not frontiers:  # every table retired: their own hours are all there is
        frontiers = [s.sealed_through for s in journals.values()]
    if not journals or any(f is None for f in frontiers):
        return {}
    frontier = min(datetime.fromisoformat(str(f)) for f in frontiers)
    complete: dict[str, dict[str, int]] = {}
    for hour in sorted({h for s in journals.values() for h in s.hours}):
        entries = {t: s.hours[hour] for t, s in journals.items() if hour in s.hours}
        end = datetime.fromisoformat(next(iter(entries.values())).hour_end)
        if end <= frontier and all(e.published for e in entries.values()):
            complete[hour] = {t: e.version for t, e in sorted(entries.items())}
    return complete


def quiet_frontiers(
    configs: list[TableConfig], journals: Mapping[str, JournalState], settings: Settings
) -> dict[str, str]:
    """Table -> the instant its hours are complete through, for each table that has sealed
    nothing because it never committed a row (its seal limit: the global ready time, and
    processing time, minus the commit delay). A table that never committed a batch has none:
    it holds the barrier (it may be broken, not quiet)."""

    found = {}
    for config in configs:
        if journals[config.table].sealed_through is not None:
            continue
        state = Table.read(config, settings).state.commit_log.state()
        if any(state.rows_per_hour.values()) or state.late:
            continue  # rows waiting for their seal: it holds, as any table does
        limit = seal_limit(config, state)
        if limit is not None:
            found[config.table] = limit.isoformat()
    return found


def finished_retired(
    configs: list[TableConfig], journals: Mapping[str, JournalState], settings: Settings
) -> frozenset[str]:
    """The retired members with nothing left to publish. A retired member holds the barrier
    until it is done, not from when it is retired: its last hours still seal (announcing
    the group's hour before would announce it without the member's last rows)."""
    finished = []
    for config in configs:
        if not config.source.retired:
            continue
        state = Table.read(config, settings).state.commit_log.state()
        if not unfinished_hours(config, state, journals[config.table]):
            finished.append(config.table)
    return frozenset(finished)


def digest(versions: Mapping[str, int]) -> str:
    """A short fingerprint of an hour's table versions (changes when any table amends it)."""
    text = json.dumps(sorted(versions.items()), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def announce_group(
    group: str,
    configs: list[TableConfig],
    settings: Settings,
    *,
    outlet_events: Any,
    inlet_events: Any,
    run_id: str,
    held: Mapping[str, str] | None = None,
) -> list[str]:
    """Emit one event of the group asset per hour that became complete (or changed) since the
    last confirmed announcement; the hours emitted. ``held``: members that cannot load (where
    -> why): they hold the barrier, nothing is announced."""

    if held:
        log.warning(
            "group %s: its barrier is held by members that cannot load (nothing announced until they "
            "are mended): %s",
            group,
            "; ".join(f"{where}: {why.splitlines()[0]}" for where, why in sorted(held.items())),
        )
        return []
    journals = {c.table: Table.read(c, settings).state.journal.state() for c in configs}
    retired = finished_retired(configs, journals, settings)
    complete = complete_hours(journals, retired, quiet_frontiers(configs, journals, settings))
    record = group_state_dir(settings, group) / "announced.json"
    known = _Announced.read(record)
    moved = {h: v for h, v in complete.items() if not known.holds(h, v, journals)}
    # a digest that changed only because a table left (or an older record without versions
    # for the hour, whose digest still matches) is no news: no table has a newer version
    unchanged = {
        h: v
        for h, v in moved.items()
        if h in known.versions and all(n <= known.versions[h].get(t, 0) for t, n in v.items())
    }
    if unchanged:
        known.confirm(unchanged, journals)
        known.write(record)
        log.info(
            "group %s: hours %s lost a table, none gained a version: not announced again",
            group,
            sorted(unchanged),
        )
    pending = {h: digest(v) for h, v in moved.items() if h not in unchanged}
    if not pending:
        log.info("group %s: no hour newly complete across %s tables", group, len(configs))
        return []
    asset = group_asset(group, settings)
    since = min(
        max(datetime.fromisoformat(journals[t].hours[h].sealed_at) for t in complete[h]) for h in pending
    )
    seen = announced_pairs(inlet_events[asset].after((since - LOOKBACK_SLACK).isoformat()), "digests")
    now_confirmed = {h: d for h, d in pending.items() if (h, d) in seen}
    if now_confirmed:
        known.confirm({h: complete[h] for h in now_confirmed}, journals)
        known.write(record)
    todo = {h: d for h, d in pending.items() if (h, d) not in seen}
    if not todo:
        log.info("group %s: the %s complete hours were announced by an earlier attempt", group, len(pending))
        return []
    crash_point("before_announce")
    accessor = outlet_events[asset]
    accessor.extra = {"group": group, "digests": todo, "announced_by_run": run_id}
    accessor.add_partitions(sorted(todo))
    log.info(
        "group %s: every one of its %s tables has published %s: announcing them on asset %s",
        group,
        len(configs),
        ", ".join(sorted(todo)),
        asset.name,
    )
    crash_point("after_announce")
    return sorted(todo)


def announce_group_run(
    group: str, settings: Settings, *, at: datetime, outlet_events: Any, inlet_events: Any, run_id: str
) -> list[str]:
    """The group DAG's ``announce_group`` task: the group's members as the YAMLs say now
    (every YAML read once), held by a member that cannot load or by the roster's rules as of
    ``at`` (the run's data interval end), then ``announce_group``."""
    loaded = table_configs(settings)
    members = group_members(group, settings, loaded)
    held = unloadable_members(group, settings, loaded)
    if not held:  # a broken YAML first: the roster is never formed or changed without it
        held = roster_holds(group, members, settings, every=loaded[0], at=at)
    return announce_group(
        group,
        members,
        settings,
        held=held,
        outlet_events=outlet_events,
        inlet_events=inlet_events,
        run_id=run_id,
    )


class _Announced:
    """announced.json: the confirmed (hour, digest) pairs and versions of the newest
    ``KEEP_HOURS`` hours, and ``settled`` for the older ones (see the module)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.hours: dict[str, str] = dict(data.get("hours", {}))
        self.versions: dict[str, dict[str, int]] = dict(data.get("versions", {}))
        settled = data.get("settled") or {}
        self.before: str = str(settled.get("before", ""))
        self.seqs: dict[str, int] = dict(settled.get("seqs", {}))

    @classmethod
    def read(cls, record: Location) -> _Announced:
        return cls(read_json(record) or {})

    def holds(self, hour: str, versions: Mapping[str, int], journals: Mapping[str, JournalState]) -> bool:
        """Whether ``hour`` with these table versions was announced already."""
        if hour in self.hours:
            return self.hours[hour] == digest(versions)
        if hour < self.before:  # folded: announced unless a table has a newer entry for it
            return all(journals[t].hours[hour].seq <= self.seqs.get(t, -1) for t in versions)
        return False

    def confirm(self, hours: Mapping[str, Mapping[str, int]], journals: Mapping[str, JournalState]) -> None:
        """Record ``hours`` (hour -> table versions) as announced; fold the oldest beyond
        ``KEEP_HOURS`` into ``settled``."""
        for hour, versions in hours.items():
            self.hours[hour], self.versions[hour] = digest(versions), dict(versions)
        # never fold past an hour a table holds that is not announced (quarantined, or not
        # complete yet): everything before ``before`` was announced when it was folded
        present = {h for state in journals.values() for h in state.hours}
        open_hours = [h for h in present if h >= self.before and h not in self.hours]
        limit = min(open_hours, default=None)
        oldest = sorted(self.hours)[: max(0, len(self.hours) - KEEP_HOURS)]
        folded = [h for h in oldest if limit is None or h < limit]
        for hour in folded:
            for table in self.versions.get(hour, {}):
                entry = journals.get(table, JournalState()).hours.get(hour)
                if entry is not None:
                    self.seqs[table] = max(self.seqs.get(table, -1), entry.seq)
            del self.hours[hour]
            self.versions.pop(hour, None)
        if folded:
            self.before = max(self.before, min([*self.hours, *([limit] if limit else [])]))

    def write(self, record: Location) -> None:
        replace_atomically(
            record,
            {
                "hours": dict(sorted(self.hours.items())),
                "versions": dict(sorted(self.versions.items())),
                "settled": {"before": self.before, "seqs": dict(sorted(self.seqs.items()))},
            },
        )
