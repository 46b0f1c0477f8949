"""Sealing: turn complete hours into registered Hive partitions, in hour order, idempotently.

An hour H is complete when the global ready time (from the commit log) >= H.end +
``commit_delay``. For each complete hour, in order:

1. compact its batch files (``<table>/_open/<hour>``) into ``target_file_size`` files in
   the hidden ``<table>/_sealing/<hour>``; a marker file records the result so a retry never
   rewrites an hour for nothing (a stale marker: see ``_compact``);
2. reconcile the compacted row count against the commit log's count for the hour;
3. run the quality gate (a quarantined hour stays hidden until ``tidemark release``);
4. move the hour to ``<table>/<hour>`` and register the partition (``ADD IF NOT EXISTS``),
   creating the table if missing;
5. write ``_SUCCESS``;
6. append the journal entry (create-only): the hour is sealed;
7. remove the hour's batch files.

On an object store (no rename) step 1 writes a new directory named by its content,
``<table>/<hour>/_v0001-b<last batch>``, and step 4 points the partition at it (add, then
``SET LOCATION``): nothing is moved, and a reader sees one version or another. A quarantined
hour's directory is simply not registered.

A crash at any step is repaired by running seal again for any run id. Hours with no data are
sealed empty. Late rows (records of hours sealed before their batch was planned) are either
registered in ``<table>__late`` (``side_table``) or folded into the sealed partition as a new
version of its files (``amend``), which re-announces it.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import QualityGateError, ReconciliationError, ReleaseError
from tidemark.faults import crash_point
from tidemark.hourcommit.base import PublishedHour, Writer
from tidemark.ingest.publishers import publisher
from tidemark.seal.compaction import Compactor
from tidemark.seal.due import hours_to_seal, seal_limit
from tidemark.seal.hourfiles import HourFiles, step_entry
from tidemark.seal.late import LateRows
from tidemark.settings import Settings
from tidemark.state.commitlog import LogState
from tidemark.state.journal import EntryKind, JournalEntry, JournalState
from tidemark.state.locks import Lease
from tidemark.stopwatch import Stopwatch
from tidemark.table import Table
from tidemark.time.hours import Hour, parse_key

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass
class SealResult:
    table: str
    run_id: str
    status: str  # sealed | nothing_to_seal | waiting_for_batch | no_ready_time
    ready_time: str | None = None
    sealed_through: str | None = None
    sealed: list[str] = field(default_factory=list)
    amended: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    late_registered: list[str] = field(default_factory=list)
    versions_deleted: list[str] = field(default_factory=list)  # object stores: replaced, past retention
    message: str = ""
    # seconds per phase, the whole run's and each sealed hour's: compact (read, write and the
    # count), quality (the gate), register (the metastore), journal; late (amend or side
    # table), collect (object stores' version garbage)
    timings: dict[str, float] = field(default_factory=dict)
    hour_timings: dict[str, dict[str, float]] = field(default_factory=dict)
    cpu_timings: dict[str, float] = field(default_factory=dict)  # TIDEMARK_PHASE_CPU=1: CPU s per phase

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Sealer:
    """Seals and amends the hours of one table (I/O: files, Spark, metastore, journal)."""

    def __init__(self, spark: SparkSession, table: Table, run_id: str, lease: Lease | None = None) -> None:
        self.spark = spark
        self.config = table.config
        self.run_id = run_id
        self.files = HourFiles(spark, table, run_id)
        self.layout = table.layout
        self.commit_log = table.state.commit_log
        self.journal = table.state.journal
        self.zone = table.config.event_time.time_zone
        self.writer = Writer(run_id, lease)  # checked before every step that makes an hour visible
        self.late = LateRows(self.files, self.writer)
        self.compactor = Compactor(spark, self.files, self.writer)
        self.inputs, self.versions = table.commit.inputs, table.commit.versions
        self.watch = Stopwatch()

    def entry(self, hour: Hour, state: LogState, journal: JournalState, **step: Any) -> JournalEntry:
        version = step.pop("schema_version", None) or self.files.schema_version(self.run_id)
        return step_entry(self.config, self.run_id, hour, state, journal, schema_version=version, **step)

    # -- the whole run --------------------------------------------------------------------
    def run(self) -> SealResult:
        # Before anything is compacted or registered: a config older than the one the hour's
        # batches were written with (a rolling deploy) would drop their newer columns for good.
        self.files.schema_version(self.run_id)
        state = self.commit_log.state()
        if state.last_committed >= 0:  # late and dirty files of a batch whose dump died after committing
            self.writer.check()
            last = self.commit_log.commit(state.last_committed)
            publisher(self.layout, state.last_committed).finish(last.files if last else ())
        pending = self.commit_log.pending_plan(state)
        result = SealResult(self.config.table, self.run_id, "nothing_to_seal")
        result.ready_time = state.ready.time if state.ready else None
        if pending is not None:
            result.status = "waiting_for_batch"
            result.message = (
                f"batch {pending.batch_id} (run {pending.run_id}) is planned but not committed; "
                "its rows may belong to the next hours, so nothing is sealed until it commits (if it "
                f"fails the same way on every run: tidemark resolve --table {self.config.table})"
            )
            log.warning("%s: %s", self.config.table, result.message)
            return result
        partitions = self.journal.state()
        self.writer.check()
        self._sweep_sealed_leftovers(partitions)
        hours = hours_to_seal(self.config, state, partitions)
        if not hours and seal_limit(self.config, state) is None:
            result.status = "no_ready_time"
            result.message = "no global ready time yet (see tidemark status --hour)"
        if any(state.rows_per_hour.get(h.path, 0) for h in hours):
            with self.watch.phase("compact"):  # the due hours that fit a file: one job
                self.compactor.prepare(hours, state, meanwhile=self.files.warm_up)
        for hour in hours:
            hour_watch = Stopwatch()
            try:
                entry = self._seal_hour(hour, state, partitions, hour_watch)
            except Exception as exc:  # the hours before it are sealed; this one is named
                exc.add_note(
                    f"{self.config.table}: sealing hour {hour.key} failed (hours before it: {result.sealed})"
                )
                log.error(
                    "%s: hour %s not sealed: %s: %s", self.config.table, hour.key, type(exc).__name__, exc
                )
                raise
            self.watch.add(hour_watch)
            result.hour_timings[hour.key] = hour_watch.rounded()
            log.info("%s: hour %s: phases (s) %s", self.config.table, hour.key, hour_watch.rounded())
            partitions.apply(entry)
            (result.quarantined if entry.quarantined else result.sealed).append(hour.key)
            result.status = "sealed"
        with self.watch.phase("late"):
            if self.config.late_policy == "side_table":
                result.late_registered = self.late.register(state, self.journal)
            else:
                for entry in self.late.amend(state, partitions, self.journal):
                    partitions.apply(entry)
                    result.amended.append(entry.hour)
        result.sealed_through = partitions.sealed_through
        if self.files.fresh.present:  # the fresh read in step, then what it let go of
            with self.watch.phase("fresh"):
                if self.files.fresh.sync(f"seal run {self.run_id}") and not self.files.fresh.immediate:
                    self._sweep_batch_files(partitions)
        with self.watch.phase("collect"):
            result.versions_deleted = self._collect(state, partitions)
        result.timings, result.cpu_timings = self.watch.rounded(), self.watch.rounded_cpu()
        self._fail_on_quarantine(partitions)
        log.info(
            "%s: seal run %s: ready time %s, sealed %s, amended %s, late partitions registered %s; "
            "sealed through %s; phases (s) %s",
            self.config.table,
            self.run_id,
            result.ready_time,
            result.sealed or "nothing",
            result.amended or "nothing",
            result.late_registered or "none",
            result.sealed_through,
            result.timings,
        )
        return result

    def _fail_on_quarantine(self, partitions: JournalState) -> None:
        """Fail the run (and every retry of it) that quarantined hours, so the task is red in
        Airflow; later runs succeed, and the hours wait for ``tidemark release``."""
        mine = {
            hour: list(entry.quality.get("failures", []))
            for hour, entry in partitions.hours.items()
            if entry.quarantined and entry.run_id == self.run_id
        }
        if mine:
            raise QualityGateError(self.config.table, mine)

    # -- one hour -------------------------------------------------------------------------
    def _seal_hour(
        self, hour: Hour, state: LogState, partitions: JournalState, watch: Stopwatch
    ) -> JournalEntry:
        expected = state.rows_per_hour.get(hour.path, 0)
        log.info(
            "%s: sealing hour %s (%s rows expected from the commit log)", self.config.table, hour, expected
        )
        with watch.phase("compact"):
            files, rows, home = self.compactor.compact(hour, state, expected)
        if rows != expected:
            raise ReconciliationError(
                f"{self.config.table} hour {hour.key}: {rows} rows in the compacted files != {expected} rows "
                f"committed for {hour.path} by batches <= {state.last_committed}: a batch file of the hour is missing or foreign; not sealed (docs/operations.md)"
            )
        with watch.phase("quality"):
            quality = self.files.quality_of(hour, home, rows, defaults=self.compactor.defaults(hour))
        if quality.blocks:
            log.error(
                "%s: hour %s quarantined (%s rows, files kept in %s, hidden and not registered): %s",
                self.config.table,
                hour.key,
                rows,
                self.layout.uri(home),
                "; ".join(quality.failures),
            )
        else:
            self.writer.check()
            with watch.phase("register"):
                target, _ = self.versions.reveal(hour, home, version=1, writer=self.writer)
                self.files.publish(hour, target, rows, version=1)
        kind, version = (EntryKind.QUARANTINE, 0) if quality.blocks else (EntryKind.SEAL, 1)
        entry = self.entry(
            hour,
            state,
            partitions,
            kind=kind,
            version=version,
            rows=rows,
            files=files,
            quality=quality.to_json(),
        )
        self.writer.check()
        with watch.phase("journal"):
            self.journal.append(entry)
            crash_point("after_journal_entry")
            if self.files.fresh.immediate:  # else by a later run, past the fresh read's grace
                self._drop_batch_files(hour)
        return entry

    def _drop_batch_files(self, hour: Hour) -> None:
        """The hour's batch files, once its journal entry is written."""
        self.inputs.drop_batch_files(hour)

    def _collect(self, state: LogState, partitions: JournalState) -> list[str]:
        return self.late.collect_versions(state, partitions, self.journal)

    # -- release of a quarantined hour ----------------------------------------------------
    def release(self, hour_key: str) -> JournalEntry:
        """Register a quarantined hour after a person decided its data is acceptable."""
        self.files.schema_version(self.run_id)  # refuses an older YAML before anything is visible
        partitions = self.journal.state()
        current = partitions.hours.get(hour_key)
        if current is None or current.published:
            now = f"its state is {current.kind} v{current.version}" if current else "it has not been sealed"
            raise ReleaseError(
                f"{self.config.table} hour {hour_key} is not quarantined: {now}; nothing released"
            )
        hour = parse_key(hour_key, self.zone)
        home = self.versions.where(PublishedHour.of(hour, current))  # kept hidden, unregistered
        target, _ = self.versions.reveal(hour, home, version=1, writer=self.writer)
        self.writer.check()
        self.files.publish(hour, target, current.rows, version=1)
        quality = {**current.quality, "released_by_run": self.run_id}
        entry = self.entry(
            hour,
            self.commit_log.state(),
            partitions,
            kind=EntryKind.RELEASE,
            version=1,
            rows=current.rows,
            files=current.files,
            quality=quality,
            late=current.late,
            folded_through_batch=current.folded_through_batch,
            schema_version=current.schema_version,
        )
        self.writer.check()
        self.journal.append(entry)
        log.info("%s: hour %s released and registered (%s rows)", self.config.table, hour_key, current.rows)
        self.files.fresh.sync(f"release of hour {hour_key}")
        return entry

    def _sweep_sealed_leftovers(self, partitions: JournalState) -> None:
        """Batch files of hours already sealed (a crash between journal and cleanup), and a
        hidden directory beside a published hour (a seal paused past its lease entered it)."""
        if not partitions.sealed_through:
            return
        self.versions.sweep(partitions, self.zone)
        if self.files.fresh.immediate:
            self._sweep_batch_files(partitions)

    def _sweep_batch_files(self, partitions: JournalState) -> None:
        """Batch files of sealed hours, where the table has no fresh read or it no longer
        needs them (``FreshGate``)."""
        if partitions.sealed_through:
            frontier = datetime.fromisoformat(partitions.sealed_through)
            self.inputs.sweep_sealed(self.files.fresh.past_grace(partitions), frontier, self.zone)


def preview_seal(config: TableConfig, settings: Settings) -> dict[str, Any]:
    """What a seal run would do now, changing nothing (the trigger form's dry run)."""
    table_state = Table.open(config, settings).state
    commit_log = table_state.commit_log
    state = commit_log.state()
    partitions = table_state.journal.state()
    pending = commit_log.pending_plan(state)
    hours = [] if pending is not None else [h.key for h in hours_to_seal(config, state, partitions)]
    quarantined = sorted(k for k, e in partitions.hours.items() if e.quarantined)
    message = (
        f"waiting for batch {pending.batch_id} to commit"
        if pending is not None
        else f"would seal {', '.join(hours) or 'nothing'}; quarantined: {', '.join(quarantined) or 'none'}"
    )
    log.info("%s: dry run: %s", config.table, message)
    return {
        "table": config.table,
        "status": "dry_run",
        "would_seal": hours,
        "quarantined": quarantined,
        "ready_time": state.ready.time if state.ready else None,
        "sealed_through": partitions.sealed_through,
        "message": message,
    }


def run_seal(spark: SparkSession, config: TableConfig, settings: Settings, run_id: str) -> SealResult:
    """Seal every complete hour of ``config.table``; safe to run any number of times."""
    table = Table.open(config, settings)
    with table.state.lock().hold(run_id) as lease:
        return Sealer(spark, table, run_id, lease).run()


def run_release(
    spark: SparkSession, config: TableConfig, settings: Settings, hour_key: str, run_id: str
) -> JournalEntry:
    """Register a quarantined hour (``tidemark release``); refuses any other hour."""
    table = Table.open(config, settings)
    with table.state.lock().hold(run_id) as lease:
        return Sealer(spark, table, run_id, lease).release(hour_key)
