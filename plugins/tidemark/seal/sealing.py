"""Sealing: turn complete hours into registered Hive partitions, in hour order, idempotently.

An hour H is complete when the global ready time (from the commit log) >= H.end +
``commit_delay``. For each complete hour, in order:

1. compact its batch files (``<table>/_open/<hour>``) into ``target_file_size`` files in
   ``<table>/<hour>`` (not registered yet, so invisible to metastore readers); a marker file
   records the result so a retry after registration never rewrites a visible partition;
2. reconcile the compacted row count against the commit log's count for the hour;
3. run the quality gate;
4. register the partition (``ADD IF NOT EXISTS``), creating the table if missing;
5. write ``_SUCCESS``;
6. append the journal entry (create-only): the hour is sealed;
7. remove the hour's batch files.

A crash at any step is repaired by running seal again for any run id. Hours with no data are
sealed empty. Late rows (records of hours sealed before their batch was planned) are either
registered in ``<table>__late`` (``side_table``) or folded into the sealed partition as a new
version of its files (``amend``), which re-announces it.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import QualityGateError, ReconciliationError, ReleaseError
from tidemark.faults import crash_point
from tidemark.ingest.dump import Layout
from tidemark.seal.metastore import Metastore
from tidemark.seal.quality import QualityOutcome, gate
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog, LogState
from tidemark.state.journal import EntryKind, HourJournal, JournalEntry, JournalState
from tidemark.state.layout import run_key
from tidemark.state.locks import TableLock
from tidemark.state.storage import read_json, replace_atomically
from tidemark.time.hours import Hour, hour_of, hours_from, parse_key, parse_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

COMPACTED_MARKER = "_tidemark_compacted.json"
SUCCESS = "_SUCCESS"
_BATCH_OF_FILE = re.compile(r"part-b(\d{10})-\d+\.parquet$")


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
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def seal_limit(config: TableConfig, state: LogState) -> datetime | None:
    """Hours ending at or before this instant are complete."""
    if state.ready is None or state.ready.instant is None:
        return None
    return state.ready.instant - config.watermark.commit_delay


def first_unsealed_hour(config: TableConfig, state: LogState, partitions: JournalState) -> Hour | None:
    """The sealed frontier, or the first hour with committed rows; None before any data."""
    zone = config.event_time.time_zone
    if partitions.sealed_through:
        return hour_of(datetime.fromisoformat(partitions.sealed_through), zone)
    with_data = [parse_path(p, zone) for p, n in state.rows_per_hour.items() if n]
    return min(with_data) if with_data else None


def hours_to_seal(config: TableConfig, state: LogState, partitions: JournalState) -> list[Hour]:
    """Consecutive hours from the sealed frontier (or the first hour with data) up to the limit."""
    limit = seal_limit(config, state)
    first = first_unsealed_hour(config, state, partitions)
    if limit is None or first is None:
        return []
    return list(hours_from(first, ending_by=limit))


class Sealer:
    """Seals and amends the hours of one table (I/O: files, Spark, metastore, journal)."""

    def __init__(self, spark: SparkSession, config: TableConfig, settings: Settings, run_id: str) -> None:
        self.spark = spark
        self.config = config
        self.run_id = run_id
        self.layout = Layout(settings, config.table)
        self.commit_log = CommitLog(settings.state_location, config.table)
        self.journal = HourJournal(settings.state_location, config.table)
        self.metastore = Metastore(spark, config)
        self.zone = config.event_time.time_zone
        self.extra_columns = list(config.partitioning.columns)
        # GX Data Docs need a local directory: kept beside the state when it is local
        state = settings.state_location
        self.docs_dir = (
            state.local_path() / config.table / "data_docs" if state.scheme in ("", "file") else None
        )

    # -- the whole run --------------------------------------------------------------------
    def run(self) -> SealResult:
        state = self.commit_log.state()
        pending = self.commit_log.pending_plan(state)
        result = SealResult(self.config.table, self.run_id, "nothing_to_seal")
        result.ready_time = state.ready.time if state.ready else None
        if pending is not None:
            result.status = "waiting_for_batch"
            result.message = (
                f"batch {pending.batch_id} (run {pending.run_id}) is planned but not committed; "
                "its rows may belong to the next hours, so nothing is sealed until it commits"
            )
            log.warning("%s: %s", self.config.table, result.message)
            return result
        partitions = self.journal.state()
        self._sweep_sealed_leftovers(partitions)
        hours = hours_to_seal(self.config, state, partitions)
        if not hours and seal_limit(self.config, state) is None:
            result.status = "no_ready_time"
            result.message = "no global ready time yet (see tidemark status --partition)"
        for hour in hours:
            entry = self._seal_hour(hour, state, partitions)
            partitions.apply(entry)
            (result.quarantined if entry.quarantined else result.sealed).append(hour.key)
            result.status = "sealed"
        if self.config.late_policy == "side_table":
            result.late_registered = self._register_late(state)
        else:
            for entry in self._amend(state, partitions):
                partitions.apply(entry)
                result.amended.append(entry.hour)
        result.sealed_through = partitions.sealed_through
        self._fail_on_quarantine(partitions)
        log.info(
            "%s: seal run %s: ready time %s, sealed %s, amended %s, late partitions registered %s; "
            "sealed through %s",
            self.config.table,
            self.run_id,
            result.ready_time,
            result.sealed or "nothing",
            result.amended or "nothing",
            result.late_registered or "none",
            result.sealed_through,
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
    def _seal_hour(self, hour: Hour, state: LogState, partitions: JournalState) -> JournalEntry:
        expected = state.rows_per_hour.get(hour.path, 0)
        target = self.layout.table_dir / hour.path
        log.info(
            "%s: sealing hour %s (%s rows expected from the commit log)", self.config.table, hour, expected
        )
        files, rows = self._compact(hour, target)
        if rows != expected:
            raise ReconciliationError(
                f"{self.config.table} hour {hour.key}: {rows} rows in the compacted files != {expected} rows "
                f"committed for {hour.path} by batches <= {state.last_committed}; nothing registered"
            )
        quality = self.quality_of(hour, target, rows)
        if quality.blocks:
            log.error(
                "%s: hour %s quarantined (%s rows, files kept in %s, not registered): %s",
                self.config.table,
                hour.key,
                rows,
                target,
                "; ".join(quality.failures),
            )
        else:
            self.publish(hour, target, rows, version=1)
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
        self.journal.append(entry)
        shutil.rmtree(self.layout.open_dir / hour.path, ignore_errors=True)
        return entry

    def publish(self, hour: Hour, target: Path, rows: int, *, version: int) -> None:
        """Register the hour's partitions, then mark the directory complete for path readers."""
        self.metastore.ensure_table(self.config.table, self.layout.table_dir)
        self.metastore.add_partitions(self.config.table, self.partition_specs(hour, target))
        crash_point("after_registration")
        (target / SUCCESS).write_text(json.dumps({"hour": hour.key, "rows": rows, "version": version}))

    def entry(
        self,
        hour: Hour,
        state: LogState,
        partitions: JournalState,
        *,
        kind: EntryKind,
        version: int,
        rows: int,
        files: list[str] | tuple[str, ...],
        quality: dict[str, Any],
        late: int = 0,
        folded_through_batch: int | None = None,
        seq: int | None = None,
    ) -> JournalEntry:
        """The journal entry of one step of an hour (seal, quarantine, release, amend)."""
        return JournalEntry(
            seq=partitions.last_seq + 1 if seq is None else seq,
            table=self.config.table,
            hour=hour.key,
            hour_start=hour.start.isoformat(),
            hour_end=hour.end.isoformat(),
            kind=kind,
            version=version,
            rows=rows,
            late=late,
            files=tuple(files),
            sealed_at=datetime.now(UTC).isoformat(),  # audit only: freshness in reports
            run_id=self.run_id,
            ready_time=state.ready.time if state.ready else None,
            processing_time=state.ready.processing_time if state.ready else "",
            folded_through_batch=state.last_committed
            if folded_through_batch is None
            else folded_through_batch,
            quality=quality,
        )

    # -- release of a quarantined hour ----------------------------------------------------
    def release(self, hour_key: str) -> JournalEntry:
        """Register a quarantined hour after a person decided its data is acceptable."""
        partitions = self.journal.state()
        current = partitions.hours.get(hour_key)
        if current is None or current.published:
            now = f"its state is {current.kind} v{current.version}" if current else "it has not been sealed"
            raise ReleaseError(
                f"{self.config.table} hour {hour_key} is not quarantined: {now}; nothing released"
            )
        hour = parse_key(hour_key, self.zone)
        target = self.layout.table_dir / hour.path
        self.publish(hour, target, current.rows, version=1)
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
        )
        self.journal.append(entry)
        log.info("%s: hour %s released and registered (%s rows)", self.config.table, hour_key, current.rows)
        return entry

    def _compact(self, hour: Hour, target: Path) -> tuple[list[str], int]:
        """Rewrite the hour's batch files as few files of about target_file_size."""
        marker = target / COMPACTED_MARKER
        done = read_json(marker)
        if done is not None:
            log.info(
                "%s: hour %s already compacted (%s files)", self.config.table, hour.key, len(done["files"])
            )
            return list(done["files"]), int(done["rows"])
        if target.exists():  # residue of a crashed attempt; never registered, so invisible
            shutil.rmtree(target)
        source = self.layout.open_dir / hour.path
        inputs = sorted(source.rglob("*.parquet")) if source.exists() else []
        target.mkdir(parents=True, exist_ok=True)
        files: list[str] = []
        rows = 0
        if inputs:
            size = sum(p.stat().st_size for p in inputs)
            n_files = max(1, math.ceil(size / self.config.output.target_file_size))
            frame = self.read_hour(source)
            staging = self.layout.staging_root / f"seal-{hour.key}-{run_key(self.run_id)}"
            shutil.rmtree(staging, ignore_errors=True)
            frame.repartition(n_files).write.partitionBy(*self.extra_columns).parquet(str(staging))
            crash_point("mid_compaction")
            rows = self.spark.read.parquet(str(staging)).count()
            files = self.move_staged(staging, target, "part")
            log.info(
                "%s: hour %s compacted %s batch files (%s bytes) into %s files, %s rows",
                self.config.table,
                hour.key,
                len(inputs),
                size,
                len(files),
                rows,
            )
        replace_atomically(marker, {"files": files, "rows": rows})
        return files, rows

    def move_staged(self, staging: Path, target: Path, prefix: str) -> list[str]:
        """Rename staged Parquet files into ``target`` as ``<prefix>-NNNNN.parquet`` (keeping
        extra partition subdirectories); returns their warehouse-relative paths."""
        moved = []
        for i, staged in enumerate(sorted(staging.rglob("*.parquet"))):
            final = target / staged.parent.relative_to(staging) / f"{prefix}-{i:05d}.parquet"
            final.parent.mkdir(parents=True, exist_ok=True)
            staged.replace(final)
            moved.append(str(final.relative_to(self.layout.warehouse)))
        shutil.rmtree(staging, ignore_errors=True)
        return moved

    def read_hour(self, hour_dir: Path) -> DataFrame:
        """The rows under an hour directory, extra partition columns read back from the path."""
        self.spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        frame = self.spark.read.option("basePath", str(hour_dir)).parquet(str(hour_dir))
        return frame

    def partition_specs(self, hour: Hour, target: Path) -> list[tuple[dict[str, str], Path]]:
        """(spec, location) of the metastore partitions of an hour: one per extra-column value."""
        if not self.extra_columns:
            return [(hour.spec, target)]
        specs = []
        depth = len(self.extra_columns)
        pattern = "/".join("*" for _ in range(depth))
        for leaf in sorted(p for p in target.glob(pattern) if p.is_dir()):
            values = dict(part.split("=", 1) for part in leaf.relative_to(target).parts)
            specs.append(({**hour.spec, **{c: values[c] for c in self.extra_columns}}, leaf))
        return specs

    def quality_of(self, hour: Hour, target: Path, rows: int) -> QualityOutcome:
        frame = self.read_hour(target) if rows else None
        return gate(self.config, hour, frame, self.docs_dir)

    def _sweep_sealed_leftovers(self, partitions: JournalState) -> None:
        """Batch files of hours already sealed (a crash between journal and cleanup)."""
        if not partitions.sealed_through or not self.layout.open_dir.exists():
            return
        frontier = datetime.fromisoformat(partitions.sealed_through)
        for hour_dir in self.layout.open_dir.glob("dt=*/hr=*"):
            hour = parse_path(str(hour_dir.relative_to(self.layout.open_dir)), self.zone)
            if hour.end <= frontier and hour.key in partitions.hours:
                log.warning("%s: removing batch files left by a sealed hour %s", self.config.table, hour.key)
                shutil.rmtree(hour_dir)

    # -- late rows ------------------------------------------------------------------------
    def _late_hours(self, state: LogState) -> list[Hour]:
        return sorted(parse_path(p, self.zone) for p, n in state.late_per_hour.items() if n)

    def _register_late(self, state: LogState) -> list[str]:
        """side_table: every hour with late rows is a partition of <table>__late."""
        registry_file = self.journal.root / "late_registered.json"
        registered = set((read_json(registry_file) or {}).get("hours", []))
        todo = [h for h in self._late_hours(state) if h.key not in registered]
        if not todo:
            return []
        late_table = self.config.late_table
        self.metastore.ensure_table(late_table, self.layout.late_dir)
        for hour in todo:
            location = self.layout.late_dir / hour.path
            self.metastore.add_partitions(late_table, self.partition_specs(hour, location))
            registered.add(hour.key)
        replace_atomically(registry_file, {"hours": sorted(registered)})
        return [h.key for h in todo]

    def _amend(self, state: LogState, partitions: JournalState) -> list[JournalEntry]:
        """amend: fold late rows not yet in a sealed partition into it as a new file version."""
        entries: list[JournalEntry] = []
        for hour in self._late_hours(state):
            current = partitions.hours.get(hour.key)
            if current is not None and current.quarantined:
                continue  # its late rows wait for the release
            folded = current.folded_through_batch if current else -1
            late_dir = self.layout.late_dir / hour.path
            new_files = [
                p
                for p in sorted(late_dir.rglob("*.parquet"))
                if (m := _BATCH_OF_FILE.search(p.name)) and int(m.group(1)) > folded
            ]
            if not new_files:
                continue
            version = (current.version if current else 0) + 1
            target = self.layout.table_dir / hour.path
            through = max(int(m.group(1)) for p in new_files if (m := _BATCH_OF_FILE.search(p.name)))
            staging = self.layout.staging_root / f"amend-{hour.key}-v{version}"
            shutil.rmtree(staging, ignore_errors=True)
            frame = self.spark.read.option("basePath", str(late_dir)).parquet(*map(str, new_files))
            frame.coalesce(1).write.partitionBy(*self.extra_columns).parquet(str(staging))
            added = self.spark.read.parquet(str(staging)).count()
            # One rename per file: readers see the old version or the new one, never half.
            files = [
                *(current.files if current else ()),
                *self.move_staged(staging, target, f"part-v{version:04d}"),
            ]
            self.metastore.ensure_table(self.config.table, self.layout.table_dir)
            self.metastore.add_partitions(self.config.table, self.partition_specs(hour, target))
            self.spark.catalog.refreshTable(self.config.table)
            rows = (current.rows if current else 0) + added
            (target / SUCCESS).write_text(json.dumps({"hour": hour.key, "rows": rows, "version": version}))
            entry = self.entry(
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
            )
            self.journal.append(entry)
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


def preview_seal(config: TableConfig, settings: Settings) -> dict[str, Any]:
    """What a seal run would do now, changing nothing (the trigger form's dry run)."""
    commit_log = CommitLog(settings.state_location, config.table)
    state = commit_log.state()
    partitions = HourJournal(settings.state_location, config.table).state()
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
    with TableLock(settings.state_location, config.table).hold(run_id):
        return Sealer(spark, config, settings, run_id).run()


def run_release(
    spark: SparkSession, config: TableConfig, settings: Settings, hour_key: str, run_id: str
) -> JournalEntry:
    """Register a quarantined hour (``tidemark release``); refuses any other hour."""
    with TableLock(settings.state_location, config.table).hold(run_id):
        return Sealer(spark, config, settings, run_id).release(hour_key)
