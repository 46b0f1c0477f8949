"""Retention of a table's hours (``retention.hours``; the maintenance DAG's first step,
``spark_jobs/retention.py``): old hours are dropped whole, and the drop is recorded.

One run, under the table's lock (the seal's), in an order a kill at any point repairs:

1. **Decide**: the first hour kept is the hour holding ``as_of - retention.hours``, never
   past the sealed frontier (an open hour is never dropped) and never past an hour a CDC
   snapshot label could still be merged from (``snapshot_floor``). When it moved forward,
   one journal entry (``retention``) names the hours it drops: from then on they are gone
   from the journal's state, so no amend, rebuild or report touches them again. The audit
   log gets a record of the same drop (made good by the next run if the job died in between).
2. **Unregister**: every metastore partition of an hour before the first kept one is dropped
   (all of them, each run: a drop a kill interrupted is finished by the retry).
3. **Delete**: once ``output.version_retention`` of wall-clock time has passed since a drop
   was recorded (a query that listed the hour's files before finishes its read), the dropped
   hours' directories go: every version, the markers, ``_SUCCESS``, and the late rows an
   ``amend`` table had not folded in. A pointer beside the journal remembers which drops are done.

Then the dirty records and the late side table (``retention.dirty``, ``retention.late``:
``tidemark.side_retention``). Files and journal entries of hours kept are never touched. An Iceberg table drops the hours
in one delete snapshot (whole files: its partitions are the hours); their version directories
go once the grace has passed and no live snapshot references them (the maintenance DAG's
expiry follows this step).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.faults import crash_point
from tidemark.fresh import sync_fresh
from tidemark.hourcommit.base import Writer
from tidemark.seal.thrift_metastore import open_metastore
from tidemark.side_retention import SideRetention, delete_directories
from tidemark.snapshot.snapshots import SnapshotLog
from tidemark.state.journal import EntryKind, JournalEntry, JournalState
from tidemark.state.maintenance_log import record_step
from tidemark.state.storage import read_json, replace_atomically
from tidemark.table import Table
from tidemark.time.hours import Hour, hour_of, parse_key

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.config import TableConfig
    from tidemark.settings import Settings
    from tidemark.state.locks import Lease

log = logging.getLogger(__name__)

AUDIT_ACTION = "retention"
DELETED_POINTER = "retention_deleted.json"  # beside the journal: the last drop whose files are gone


@dataclass
class RetentionResult:
    table: str
    run_id: str
    first_kept: str | None = None  # hour key; None: the table keeps every hour
    dropped: list[str] = field(default_factory=list)  # hours this run dropped
    rows_dropped: int = 0
    unregistered: list[str] = field(default_factory=list)  # metastore partitions
    files_deleted: int = 0
    bytes_deleted: int = 0
    waiting: list[str] = field(default_factory=list)  # dropped hours whose files wait out the grace
    dry_run: bool = False
    side: dict[str, Any] = field(default_factory=dict)  # the dirty and late tables' (side_retention)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def snapshot_floor(floor: datetime, labels: Iterable[Sequence[str]], zone: str) -> datetime:
    """Lower ``floor`` until no label that reads a kept hour also reads a dropped one: a late
    change to a kept hour re-merges every label that read it, from all the hours it read."""
    spans = [
        (min(h.start for h in hours), max(h.end for h in hours)) for hours in _parsed(labels, zone) if hours
    ]
    moved = True
    while moved:
        moved = False
        for first, end in spans:
            if end > floor and first < floor:
                floor, moved = first, True
    return floor


def _parsed(labels: Iterable[Sequence[str]], zone: str) -> list[list[Hour]]:
    return [[parse_key(key, zone) for key in hours] for hours in labels]


def first_kept_hour(
    config: TableConfig, journal: JournalState, as_of: datetime, labels: Iterable[Sequence[str]] = ()
) -> Hour | None:
    """The first hour the table keeps as of ``as_of`` (pure); None without a retention or
    before anything is sealed."""
    keep = config.retention.hours
    if keep is None or journal.sealed_through is None:
        return None
    zone = config.event_time.time_zone
    boundary = min(as_of - keep, datetime.fromisoformat(journal.sealed_through))
    return hour_of(snapshot_floor(boundary, labels, zone), zone)


def run_retention(
    spark: SparkSession,
    config: TableConfig,
    settings: Settings,
    run_id: str,
    as_of: datetime,
    *,
    dry_run: bool = False,
) -> RetentionResult:
    """Drop the hours past ``retention.hours`` (see the module doc); safe to retry."""
    table = Table.open(config, settings)
    with table.state.lock().hold(run_id) as lease:
        now = datetime.now(UTC)  # the grace is for readers, in wall-clock time
        retention = Retention(spark, table, run_id, lease)
        result = retention.run(min(as_of, now), now, dry_run=dry_run)
        side = SideRetention(spark, table, retention.writer).run(min(as_of, now), now, dry_run=dry_run)
        result.side = side.to_json()
        result.files_deleted += side.files_deleted
        result.bytes_deleted += side.bytes_deleted
        if not dry_run:
            sync_fresh(table, f"retention run {run_id}")  # the dropped hours leave the fresh read
            summary = {
                "first_hour_kept": result.first_kept,
                "hours_dropped_now": len(result.dropped),
                "files_deleted": result.files_deleted,
                "bytes_deleted": result.bytes_deleted,
            }
            if config.retention.dirty is not None:
                summary["dirty_dropped_through_batch"] = side.dirty_through_batch
            if config.retention.late is not None:
                summary["first_late_hour_kept"] = side.late_first_kept
            record_step(table.state.journal.root, "retention", run_id, summary)
        return result


class Retention:
    """One table's retention run (I/O: journal, audit log, metastore, files)."""

    def __init__(self, spark: SparkSession, table: Table, run_id: str, lease: Lease | None = None) -> None:
        self.spark = spark
        self.table = table
        self.config = table.config
        self.run_id = run_id
        self.writer = Writer(run_id, lease)
        self.journal = table.state.journal
        self.zone = table.config.event_time.time_zone

    def run(self, clock: datetime, now: datetime, *, dry_run: bool = False) -> RetentionResult:
        """``clock``: what hours are aged from (the run's data interval end, at most now);
        ``now``: the wall clock the grace of a drop is judged by."""
        result = RetentionResult(self.config.table, self.run_id, dry_run=dry_run)
        state = self.journal.state()
        first = first_kept_hour(self.config, state, clock, self._label_hours())
        if first is not None and (state.kept_from is None or first.start.isoformat() > state.kept_from):
            gone = sorted(
                (e for e in state.hours.values() if e.hour_start < first.start.isoformat()), key=_start
            )
            result.dropped = [e.hour for e in gone]
            result.rows_dropped = sum(e.rows for e in gone)
            if dry_run:
                log.info(
                    "%s: dry run: would drop %s hours before %s", self.config.table, len(gone), first.key
                )
                result.first_kept = first.key
                return result
            if gone:  # else no sealed hour is that old yet: nothing to record
                self._record(first, gone, state, clock)
                state = self.journal.state()
        if state.kept_from is None:
            log.info("%s: no hour is past the retention (%s)", self.config.table, self.config.retention.hours)
            return result
        result.first_kept = hour_of(datetime.fromisoformat(state.kept_from), self.zone).key
        self._audit_drops()
        result.unregistered = self._unregister(datetime.fromisoformat(state.kept_from), dry_run=dry_run)
        if not dry_run:
            self._delete(now, result)
        log.info(
            "%s: first hour kept %s; dropped %s hours (%s rows) now, %s partitions unregistered, %s files "
            "(%s bytes) deleted; %s dropped hours wait out the grace (%s) before their files go",
            self.config.table,
            result.first_kept,
            len(result.dropped),
            result.rows_dropped,
            len(result.unregistered),
            result.files_deleted,
            result.bytes_deleted,
            len(result.waiting),
            self.config.output.version_retention,
        )
        return result

    # -- 1. decide --------------------------------------------------------------------------
    def _label_hours(self) -> list[list[str]]:
        """The hours each CDC snapshot label read (none for a table without snapshots)."""
        if self.config.cdc is None:
            return []
        live = SnapshotLog(self.table.settings.state_location, self.config.table).live()
        return [list(record.hours) for record in live.values()]

    def _record(self, first: Hour, gone: list[JournalEntry], state: JournalState, clock: datetime) -> None:
        self.writer.check()
        entry = JournalEntry(
            seq=state.last_seq + 1,
            table=self.config.table,
            hour=first.key,
            hour_start=first.start.isoformat(),
            hour_end=first.end.isoformat(),
            kind=EntryKind.RETENTION,
            version=0,
            rows=sum(e.rows for e in gone),
            late=sum(e.late for e in gone),
            files=(),
            sealed_at=datetime.now().astimezone().isoformat(),
            run_id=self.run_id,
            ready_time=None,
            processing_time=clock.isoformat(),
            folded_through_batch=-1,
            dropped=tuple(e.hour for e in gone),
        )
        self.journal.append(entry)
        crash_point("after_retention_entry")

    def _audit_drops(self) -> None:
        """An audit record per retention entry after the last one audited (the job may have
        died between the two): the journal is read from there, not from its start."""
        audit = self.table.state.audit
        recorded = [r.detail.get("journal_seq", -1) for r in audit.records() if r.action == AUDIT_ACTION]
        for entry in self.journal.entries(max(recorded, default=-1) + 1):
            if entry.kind is not EntryKind.RETENTION:
                continue
            span = f"{entry.dropped[0]} .. {entry.dropped[-1]}" if entry.dropped else "none"
            audit.append(
                action=AUDIT_ACTION,
                reason=f"retention.hours = {self.config.retention.hours}: hours before {entry.hour} dropped",
                by=f"tidemark maintenance (run {entry.run_id})",
                at=entry.sealed_at,
                batch_id=None,
                offsets="",
                detail={
                    "journal_seq": entry.seq,
                    "first_kept": entry.hour,
                    "hours": span,
                    "rows": entry.rows,
                },
            )

    # -- 2. unregister ----------------------------------------------------------------------
    def _unregister(self, kept_from: datetime, *, dry_run: bool) -> list[str]:
        if dry_run:
            return []
        metastore = open_metastore(self.spark, self.config, self.table.settings)
        self.writer.check()
        first = hour_of(kept_from, self.zone)
        names = self.table.commit.publication.withdraw_before(metastore, first)
        if names:
            log.info(
                "%s: withdrew %s partitions of dropped hours: %s",
                self.config.table,
                len(names),
                ", ".join(names),
            )
        return names

    # -- 3. delete --------------------------------------------------------------------------
    def _delete(self, now: datetime, result: RetentionResult) -> None:
        pointer = self.journal.root / DELETED_POINTER
        done = int((read_json(pointer) or {}).get("seq", -1))
        grace = self.config.output.version_retention
        for entry in self.journal.entries(done + 1):
            if entry.kind is not EntryKind.RETENTION:
                continue
            if datetime.fromisoformat(entry.sealed_at) > now - grace:
                result.waiting.extend(entry.dropped)
                break  # later drops are younger still
            hours = [parse_key(key, self.zone) for key in entry.dropped]
            directories = self._retired_dirs(hours)
            if self.table.commit.publication.still_reads(directories):  # a live snapshot's
                result.waiting.extend(entry.dropped)
                break
            if self.config.late_policy == "amend":  # late rows never folded into a dropped hour
                directories += [self.table.commit.inputs.late_inputs(hour) for hour in hours]
            self._delete_dirs(directories, result)
            crash_point("before_retention_pointer")
            replace_atomically(pointer, {"seq": entry.seq})

    def _retired_dirs(self, hours: list[Hour]) -> list[Path]:
        """The directories of dropped hours' versions (their own ones lie under the hour's; a
        quarantined one's hidden beside), deleted once the grace has passed and nothing the
        publication keeps reads them."""
        layout = self.table.layout
        return [d for hour in hours for d in (layout.table_dir / hour.path, layout.sealing_dir / hour.path)]

    def _delete_dirs(self, directories: list[Path], result: RetentionResult) -> None:
        files, size = delete_directories(self.table.layout, self.writer, directories)
        result.files_deleted += files
        result.bytes_deleted += size


def _start(entry: JournalEntry) -> str:
    return entry.hour_start
