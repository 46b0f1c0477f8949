"""Planning a merge (no Spark): which snapshot it starts from, which sealed hours (and their
versions) it reads, whether a merged snapshot is stale, and the dry run.

The merge is driven by sealing, not by a clock: every increment hour in (previous, T] must be
sealed (its end is before the sealed frontier), or the plan refuses and names the hours. An
hour with no rows is final once the frontier passed it, and empty. A merged snapshot records
the version of every hour it read, so an amend of one of them makes it *stale*.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidemark.config import TableConfig
from tidemark.errors import MergeError, UnsealedHoursError
from tidemark.hourcommit.versions import version_dirs
from tidemark.settings import Settings
from tidemark.snapshot.snapshots import (
    Period,
    SnapshotLog,
    SnapshotRecord,
    base_for,
    format_name,
    is_versioned,
    period_of,
)
from tidemark.state.journal import JournalState
from tidemark.table import Table
from tidemark.time.hours import hour_of, hours_from


def published_versions(partitions: JournalState) -> dict[str, int]:
    """hour -> the version readers see (quarantined hours are not published)."""
    return {h: e.version for h, e in partitions.hours.items() if e.published}


@dataclass(frozen=True)
class MergePlan:
    period: Period
    base: SnapshotRecord
    hours: dict[str, int]  # hour key -> version to read; 0 = final and empty
    folded: dict[str, int] = field(default_factory=dict)  # hour key -> last batch it holds
    # object stores: hour key -> the version directory its journal entry's files lie in
    directories: dict[str, str] = field(default_factory=dict)

    def hour_keys_with_rows(self) -> list[str]:
        return [h for h, v in self.hours.items() if v > 0]

    def describe(self) -> str:
        """What the merge reads: its base and every hour's version (names a snapshot version)."""
        hours = ",".join(f"{h}@v{v}/b{self.folded.get(h, -1)}" for h, v in sorted(self.hours.items()))
        return f"{self.period.label} = {self.base.ref} + {hours}"


def plan_merge(
    config: TableConfig, period: Period, live: dict[str, SnapshotRecord], partitions: JournalState
) -> MergePlan:
    """Which snapshot to start from and which hours to read; refuses unsealed hours."""
    base = base_for(live, period)
    if base is None:
        raise MergeError(
            f"{config.table}: no snapshot holds a state before {period.label} ends ({period.end.isoformat()}): "
            f"bootstrap first (the tidemark_bootstrap_{config.table} DAG or `tidemark bootstrap`)"
        )
    first = hour_of(datetime.fromisoformat(base.increments_from), config.event_time.time_zone)
    hours = list(hours_from(first, ending_by=period.end))
    versions = published_versions(partitions)
    frontier = datetime.fromisoformat(partitions.sealed_through) if partitions.sealed_through else None
    waiting: dict[str, str] = {}
    for hour in hours:
        entry = partitions.hours.get(hour.key)
        if entry is not None and entry.quarantined:
            waiting[hour.key] = f"quarantined by the quality gate (tidemark release --table {config.table})"
        elif entry is None and (frontier is None or hour.end > frontier):
            waiting[hour.key] = "not sealed yet: the global watermark has not passed its end"
    if waiting:
        raise UnsealedHoursError(config.table, period.label, waiting)
    folded = {h.key: partitions.hours[h.key].folded_through_batch for h in hours if versions.get(h.key, 0)}
    directories = {
        h.key: found.pop()
        for h in hours
        if versions.get(h.key, 0) and len(found := version_dirs(list(partitions.hours[h.key].files))) == 1
    }
    return MergePlan(period, base, {h.key: versions.get(h.key, 0) for h in hours}, folded, directories)


def is_stale(record: SnapshotRecord, live: dict[str, SnapshotRecord], partitions: JournalState) -> bool:
    """A merged snapshot whose hours were amended (or whose base changed) since it was built."""
    if record.kind != "merge":
        return False
    versions = published_versions(partitions)
    if any(versions.get(hour, 0) != version for hour, version in record.hours.items()):
        return True
    base_label = record.base.rsplit("@", 1)[0]
    base = live.get(base_label)
    return base is None or base.ref != record.base or is_stale(base, live, partitions)


def plan_versioned_merge(
    config: TableConfig,
    period: Period,
    records: list[SnapshotRecord],
    head: SnapshotRecord,
    partitions: JournalState,
) -> MergePlan | SnapshotRecord:
    """A Delta or Iceberg snapshot's merge of ``period`` on top of its current version ``head``: the
    plan (its base is the anchor: ``head`` itself, or when late changes made ``head`` stale,
    the newest snapshot still current), or the record already holding the period (nothing to
    do). Refuses a period behind ``head``: such snapshots only move forward."""
    live = {r.label: r for r in records}
    current = live.get(period.label)
    kind = format_name(config)
    if period.label != head.label and period.end <= head.through_at:
        if current is not None and not is_stale(current, live, partitions):
            return current
        if base_for(live, period) is None:
            plan_merge(config, period, live, partitions)  # raises: bootstrap first
        kept = (
            f"; {kind} version {current.table_version} keeps {current.ref} as it was merged"
            if current is not None
            else ""
        )
        raise MergeError(
            f"{config.table}: snapshot {period.label} is behind the {kind} snapshot's current version "
            f"{head.table_version} ({head.ref}, the state through {head.through}): {kind} snapshots "
            f"only move forward. Late changes to its hours are folded into the next merge of "
            f"{head.label} (tidemark merge --table {config.table} --snapshot {head.label}){kept}"
        )
    if period.label == head.label and not is_stale(head, live, partitions):
        return head
    refs = {r.ref: r for r in records}
    anchor = head if period.label != head.label else refs[head.base]
    while is_stale(anchor, live, partitions):  # a bootstrap is never stale
        anchor = refs[anchor.base]
    return plan_merge(config, period, {anchor.label: anchor}, partitions)


def versioned_head(records: list[SnapshotRecord]) -> SnapshotRecord | None:
    """The record of the newest table version (Delta, Iceberg) the log knows."""
    versions = [r for r in records if r.table_version >= 0]
    return max(versions, key=lambda r: r.table_version) if versions else None


def stale_snapshot(config: TableConfig, settings: Settings) -> str | None:
    """The newest merged snapshot if it (or one it builds on) is stale: merging it again
    re-merges the whole stale chain. None when every snapshot is current."""
    log = SnapshotLog(settings.state_location, config.table)
    live = log.live()
    if is_versioned(config):  # only the current table version can be merged again (forward only)
        head = versioned_head(list(log.records()))
        merged = [head] if head is not None and head.kind == "merge" else []
    else:
        merged = [r for r in live.values() if r.kind == "merge"]
    if not merged:
        return None
    newest = max(merged, key=lambda r: r.through_at)
    partitions = Table.read(config, settings).state.journal.state()
    return newest.label if is_stale(newest, live, partitions) else None


def preview_merge(config: TableConfig, settings: Settings, label: str) -> dict[str, Any]:
    """What a merge of ``label`` would read (dry run): base, hours, or why it would refuse."""
    period = period_of(config, label)
    log = SnapshotLog(settings.state_location, config.table)
    live = log.live()
    partitions = Table.read(config, settings).state.journal.state()
    preview: dict[str, Any] = {"table": config.table, "snapshot": period.label, "dry_run": True}
    try:
        if is_versioned(config):
            records = list(log.records())
            head = versioned_head(records)
            if head is None:
                raise MergeError(f"{config.table}: no {format_name(config)} snapshot yet: bootstrap first")
            planned = plan_versioned_merge(config, period, records, head, partitions)
            if isinstance(planned, SnapshotRecord):
                return {**preview, "already_merged": planned.ref, "table_version": planned.table_version}
            how = "merge into" if planned.base.ref == head.ref else "recompute, merge the difference into"
            return {**preview, "base": planned.base.ref, "into": f"{how} {head.ref}", "hours": planned.hours}
        plan = plan_merge(config, period, live, partitions)
    except MergeError as exc:
        return {**preview, "would_refuse": str(exc)}
    stale = plan.base.kind == "merge" and is_stale(plan.base, live, partitions)
    return {**preview, "base": plan.base.ref, "base_stale": stale, "hours": plan.hours}
