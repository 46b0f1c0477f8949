"""Retention of a table's dirty records (``retention.dirty``) and of its late side table
(``retention.late``), run by the maintenance DAG's retention step after the hours'
(``tidemark.retention``), under the same lock, in an order a kill at any point repairs.

**Dirty records.** Every batch committed (its processing time) more than ``retention.dirty``
before the run loses its dirty records: ``<table>__dirty/batch_id=N/`` and the replay input
kept hidden under ``_replayed/``. The horizon (the last batch dropped,
``state/dirty_retention.py``) is recorded first, then the audit record, then the files go: a
reader of ``<table>__dirty`` reads it by path, so the age itself is the grace. From the
record on, a rebuild of an hour such a batch fed refuses by name (it could no longer tell the
records that batch left dirty); ``tidemark replay`` finds nothing of those batches to replay.

**Late side table.** The first late hour kept is the one holding ``as of - retention.late``.
It is written into the late registry (``late_registered.json``: ``kept_from``, and each drop's time),
so no seal registers an older hour again, even when a later late row of it arrives; then
the older partitions of ``<table>__late`` are dropped; once ``output.version_retention`` has
passed since that drop (each drop's own time: a daily run moves the horizon every day), their
directories go (every version, the hidden batch files, a late
row that arrived after the drop).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.faults import crash_point
from tidemark.hourcommit.base import Writer
from tidemark.seal.late import LateRows
from tidemark.seal.thrift_metastore import open_metastore
from tidemark.state.dirty_retention import dropped_through, record_dropped_through
from tidemark.state.layout import Layout, partition_hour_values
from tidemark.state.storage import read_json, replace_atomically
from tidemark.table import Table
from tidemark.time.hours import Hour, hour_of, parse_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DIRTY_ACTION = "retention_dirty"
LATE_ACTION = "retention_late"


@dataclass
class SideRetentionResult:
    dirty_through_batch: int = -1  # the last batch whose dirty records are dropped; -1: none
    dirty_batches_deleted: list[int] = field(default_factory=list)
    late_first_kept: str | None = None
    late_unregistered: list[str] = field(default_factory=list)
    late_hours_deleted: list[str] = field(default_factory=list)
    files_deleted: int = 0
    bytes_deleted: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class SideRetention:
    """One table's dirty and late retention (I/O: state, audit log, metastore, files)."""

    def __init__(self, spark: SparkSession, table: Table, writer: Writer) -> None:
        self.spark = spark
        self.table = table
        self.config = table.config
        self.layout = table.layout
        self.writer = writer
        self.root = table.state.journal.root
        self.zone = table.config.event_time.time_zone

    def run(self, clock: datetime, now: datetime, *, dry_run: bool = False) -> SideRetentionResult:
        result = SideRetentionResult()
        if self.config.retention.dirty is not None:
            self._dirty(clock - self.config.retention.dirty, result, dry_run=dry_run)
        if self.config.retention.late is not None:
            self._late(hour_of(clock - self.config.retention.late, self.zone), now, result, dry_run=dry_run)
        return result

    # -- dirty records ----------------------------------------------------------------------
    def _dirty_batches(self) -> list[int]:
        """Batches with dirty files, visible or kept as a replay's input."""
        store, dirty = self.layout.store, self.layout.dirty_dir
        names = store.children(self.layout.relative(dirty)) + store.children(
            self.layout.relative(dirty / "_replayed")
        )
        return sorted(
            {int(n.removeprefix("batch_id=")) for n in names if n.removeprefix("batch_id=").isdigit()}
        )

    def _dirty(self, horizon: datetime, result: SideRetentionResult, *, dry_run: bool) -> None:
        commit_log = self.table.state.commit_log
        present = self._dirty_batches()
        old = []
        for batch in present:  # batch ids follow their commits' processing time
            commit = commit_log.commit(batch)
            if commit is None or datetime.fromisoformat(commit.processing_time) >= horizon:
                break
            old.append(batch)
        through = max([dropped_through(self.root), *old])
        result.dirty_through_batch = through
        if dry_run:
            log.info("%s: dry run: would drop the dirty records of batches %s", self.config.table, old)
            return
        if old:
            self.writer.check()
            detail = {"horizon": horizon.isoformat(), "run_id": self.writer.run_id}
            record_dropped_through(self.root, through, detail)
            crash_point("after_dirty_horizon")
        self._audit(DIRTY_ACTION, "through_batch", through, f"dirty records of batches through {through}")
        for batch in (b for b in present if b <= through):
            self._delete([self.layout.dirty_batch_dir(batch), self.layout.replayed_dirty_dir(batch)], result)
            result.dirty_batches_deleted.append(batch)
        if result.dirty_batches_deleted:
            log.info(
                "%s: retention.dirty (%s): dirty records of batches %s deleted (committed before %s)",
                self.config.table,
                self.config.retention.dirty,
                ", ".join(map(str, result.dirty_batches_deleted)),
                horizon.isoformat(),
            )

    # -- the late side table ----------------------------------------------------------------
    def _late(self, first: Hour, now: datetime, result: SideRetentionResult, *, dry_run: bool) -> None:
        registry = LateRows.registry_file(self.table.state.journal)
        recorded = read_json(registry) or {}
        kept_from = recorded.get("kept_from")
        if dry_run:
            result.late_first_kept = first.key
            return
        if kept_from is None or first.start.isoformat() > kept_from:
            self.writer.check()
            kept_from = first.start.isoformat()
            hours = recorded.get("hours", {})
            recorded = {
                **recorded,
                "kept_from": kept_from,
                # each drop's own time: its files wait out the grace from it, not from a later drop's
                "drops": [
                    *_pending(recorded, self.config.output.version_retention, now),
                    {"kept_from": kept_from, "at": now.isoformat()},
                ],
                "hours": {k: v for k, v in hours.items() if k >= first.key}
                if isinstance(hours, dict)
                else hours,
                "locations": {k: v for k, v in recorded.get("locations", {}).items() if k >= first.key},
            }
            replace_atomically(registry, recorded)
            crash_point("after_late_horizon")
        first = hour_of(datetime.fromisoformat(kept_from), self.zone)
        result.late_first_kept = first.key
        self._audit(LATE_ACTION, "first_kept", first.key, f"late rows of hours before {first.key}")
        metastore = open_metastore(self.spark, self.config, self.table.settings)
        late_table = self.config.late_table
        names = [
            n
            for n in metastore.partition_names(late_table)
            if partition_hour_values(n) < (first.dt, first.hr)
        ]
        if names:
            self.writer.check()
            metastore.drop_partitions(late_table, names)
            metastore.refresh(late_table)
            result.late_unregistered = names
        ripe = _ripe(recorded.get("drops", []), self.config.output.version_retention, now)
        if not ripe:
            return  # a query that listed the dropped partitions finishes first
        reach = max(d["kept_from"] for d in ripe)
        for hour in self._late_hours_before(hour_of(datetime.fromisoformat(reach), self.zone)):
            self._delete(
                [self.layout.late_dir / hour.path, self.table.commit.inputs.late_inputs(hour)], result
            )
            result.late_hours_deleted.append(hour.key)

    def _late_hours_before(self, first: Hour) -> list[Hour]:
        """The hours under the late table's directories (its own and the hidden ``_open``)
        older than ``first``."""
        store, found = self.layout.store, set()
        for base in {self.layout.late_dir, self.layout.late_open_dir}:
            for day in store.children(self.layout.relative(base)):
                if day.startswith("dt=") and day[3:] <= first.dt:
                    for hour in store.children(self.layout.relative(base / day)):
                        if hour.startswith("hr=") and (day[3:], hour[3:]) < (first.dt, first.hr):
                            found.add(f"{day}/{hour}")
        return sorted((parse_path(p, self.zone) for p in found), key=lambda h: h.start)

    # -- shared ------------------------------------------------------------------------------
    def _audit(self, action: str, key: str, value: Any, what: str) -> None:
        """One audit record per new horizon (made good by the retry of a run that died
        between its record and the audit's)."""
        audit = self.table.state.audit
        last = [r.detail.get(key) for r in audit.records() if r.action == action]
        if (last and last[-1] == value) or value == -1:
            return
        setting, keep = (
            ("retention.dirty", self.config.retention.dirty)
            if action == DIRTY_ACTION
            else ("retention.late", self.config.retention.late)
        )
        audit.append(
            action=action,
            reason=f"{setting} = {keep}: {what} dropped",
            by=f"tidemark maintenance (run {self.writer.run_id})",
            at=datetime.now().astimezone().isoformat(),
            batch_id=None,
            offsets="",
            detail={key: value},
        )

    def _delete(self, directories: list[Path], result: SideRetentionResult) -> None:
        files, size = delete_directories(self.layout, self.writer, directories)
        result.files_deleted += files
        result.bytes_deleted += size


def delete_directories(layout: Layout, writer: Writer, directories: list[Path]) -> tuple[int, int]:
    """Delete retention's directories, each after a check of the writer's lease; the (files,
    bytes) they held, for the log line (the hours' retention uses it too)."""
    files = size = 0
    for directory in directories:
        writer.check()
        found, held = layout.store.delete_counted(layout.relative(directory))
        files, size = files + found, size + held
    return files, size


def _ripe(drops: list[dict[str, str]], grace: timedelta, now: datetime) -> list[dict[str, str]]:
    """The late registry's drops whose grace has passed (counted from each drop's own time)."""
    return [d for d in drops if datetime.fromisoformat(d["at"]) + grace <= now]


def _pending(recorded: dict[str, Any], grace: timedelta, now: datetime) -> list[dict[str, str]]:
    """The late registry's drops whose files may still wait: the newest one past its grace
    (the horizon deletions reach) and every younger one."""
    drops = list(recorded.get("drops", []))
    ripe = _ripe(drops, grace, now)
    newest = max(ripe, key=lambda d: d["kept_from"], default=None)
    return [d for d in drops if d not in ripe or d is newest]
