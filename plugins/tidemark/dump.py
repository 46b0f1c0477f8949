"""The exactly-once micro-batch dump: one batch per Airflow run id.

Protocol (seeds 000/003: commit, rollback and recommit of an in-flight instant):

1. take the table's batch lock; a committed run is a no-op ("already committed");
2. plan (or reuse the run's plan) and persist it before reading anything;
3. roll back whatever an earlier uncommitted attempt of this batch left (staging files and
   files it had already moved into the table, found through its publish manifest);
4. read exactly the planned ranges, classify rows/dirty, write both to a staging dir named by
   batch and attempt;
5. reconcile per MQ partition: records read (source receipts) == rows + dirty; check the dirty
   ratio;
6. publish: write the manifest of deterministic target names, then move the files in;
7. write the commit record (create-only): the batch is now visible;
8. commit consumer-group offsets (lag monitoring only).
A crash anywhere before 7 is undone by the retry's step 3; after 7 the retry is a no-op.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark import cardinality
from tidemark.commitlog import Commit, CommitLog, LogState, PartitionStats, Plan, TableLock
from tidemark.config import TableConfig
from tidemark.errors import DirtyRatioExceededError, ReconciliationError
from tidemark.faults import crash_point
from tidemark.kafka import client_properties, commit_group_offsets, masked
from tidemark.planner import plan_batch
from tidemark.settings import Settings
from tidemark.watermarks import BatchObservation, PartitionWatermark, ReadyTime, advance, ready_time

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DumpResult:
    table: str
    batch_id: int
    run_id: str
    status: str  # committed | already_committed
    read: int
    rows: int
    dirty: int
    offsets: dict[int, list[int]] = field(default_factory=dict)
    # seconds per phase of this attempt (plan, rollback, read_stage, reconcile, publish, commit)
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


class Stopwatch:
    """Seconds spent per named phase: logged with the commit and printed by the benchmark."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.seconds.items()}


class Layout:
    """Where a table's files live (one filesystem: staging renames into the table).

    Batches land in ``<table>/_open/dt=/hr=`` (hidden from path-based readers by the leading
    underscore); sealing compacts an hour into ``<table>/dt=/hr=`` and registers it.
    """

    def __init__(self, settings: Settings, table: str) -> None:
        self.warehouse = Path(settings.warehouse)
        self.table_dir = self.warehouse / table
        self.open_dir = self.table_dir / "_open"
        self.dirty_dir = self.warehouse / f"{table}__dirty"
        self.late_dir = self.warehouse / f"{table}__late"
        self.staging_root = self.warehouse / ".tidemark_staging" / table

    def batch_staging(self, batch_id: int) -> Path:
        return self.staging_root / f"b{batch_id:010d}"


class Publisher:
    """Moves a batch's staged files into the table under deterministic names, and undoes an
    uncommitted attempt's moves through the manifest it wrote before moving anything."""

    def __init__(self, layout: Layout, batch_id: int) -> None:
        self.layout = layout
        self.batch_id = batch_id
        self.batch_dir = layout.batch_staging(batch_id)
        self.attempt_dir = self.batch_dir / f"attempt-{uuid.uuid4().hex[:12]}"

    def rollback(self) -> int:
        """Delete files earlier uncommitted attempts of this batch published or staged."""
        removed = 0
        for manifest in sorted(self.batch_dir.glob("attempt-*/publish.json")):
            for _, target in json.loads(manifest.read_text())["moves"]:
                path = self.layout.warehouse / target
                if path.exists():
                    path.unlink()
                    removed += 1
        if self.batch_dir.exists():
            shutil.rmtree(self.batch_dir)
        if removed:
            log.warning("batch %s: rolled back %s files of an uncommitted attempt", self.batch_id, removed)
        return removed

    def targets(self) -> list[tuple[str, str]]:
        """(staged, target) pairs relative to the warehouse, in a deterministic order."""
        moves = []
        for kind, base_dir in (("rows", self.layout.open_dir), ("late", self.layout.late_dir)):
            staged_root = self.attempt_dir / kind
            for i, staged in enumerate(sorted(staged_root.rglob("*.parquet"))):
                hour_dir = staged.parent.relative_to(staged_root)
                target = base_dir / hour_dir / f"part-b{self.batch_id:010d}-{i:05d}.parquet"
                moves.append((staged, target))
        dirty = self.attempt_dir / "dirty"
        for i, staged in enumerate(sorted(dirty.rglob("*.parquet"))):
            target = self.layout.dirty_dir / f"batch_id={self.batch_id}" / f"part-{i:05d}.parquet"
            moves.append((staged, target))
        base = self.layout.warehouse
        return [(str(s.relative_to(base)), str(t.relative_to(base))) for s, t in moves]

    def publish(self) -> list[str]:
        moves = self.targets()
        self.attempt_dir.mkdir(parents=True, exist_ok=True)
        (self.attempt_dir / "publish.json").write_text(json.dumps({"moves": moves}))
        base = self.layout.warehouse
        for i, (staged, target) in enumerate(moves):
            if i == len(moves) // 2:
                crash_point("mid_move")
            (base / target).parent.mkdir(parents=True, exist_ok=True)
            os.replace(base / staged, base / target)
        return [t for _, t in moves]

    def cleanup(self) -> None:
        shutil.rmtree(self.batch_dir, ignore_errors=True)


@dataclass(frozen=True)
class Staged:
    """What a batch's staged files hold, reconciled against the read receipts."""

    stats: list[PartitionStats]
    per_hour: dict[str, dict[str, int]]
    reasons: dict[str, int]
    partition_values: dict[str, dict[str, list[str]]]


def _grouped_stats(classified: Any, config: TableConfig) -> list[Any]:
    """The counts a staging task returns (``staging.TaskStager.stats``), from a classified
    frame in one aggregation pass (a handful of groups: partitions x hours x reasons)."""
    from pyspark.sql import functions as F

    ts = F.col(config.event_time.field)
    return (
        classified.groupBy("_mq_partition", "dt", "hr", "_late", "_reason")
        .agg(F.count(F.lit(1)).alias("n"), F.min(ts).alias("min_ts"), F.max(ts).alias("max_ts"))
        .collect()
    )


def fold_stats(
    groups: list[Any],
) -> tuple[dict[int, dict[str, Any]], dict[str, dict[str, int]], dict[str, int]]:
    """Counts per MQ partition, per hour and per dirty reason, folded from grouped counts."""
    per_partition: dict[int, dict[str, Any]] = {}
    per_hour: dict[str, dict[str, int]] = {"rows": {}, "late": {}}
    reasons: dict[str, int] = {}
    for g in groups:
        n = int(g["n"])
        part = per_partition.setdefault(
            g["_mq_partition"], {"rows": 0, "dirty": 0, "late": 0, "min_ts": None, "max_ts": None}
        )
        if g["_reason"] is not None:
            part["dirty"] += n
            reasons[g["_reason"]] = reasons.get(g["_reason"], 0) + n
            continue
        kind = "late" if g["_late"] else "rows"
        part[kind] += n
        hour = f"dt={g['dt']}/hr={g['hr']}"
        per_hour[kind][hour] = per_hour[kind].get(hour, 0) + n
        part["min_ts"] = g["min_ts"] if part["min_ts"] is None else min(part["min_ts"], g["min_ts"])
        part["max_ts"] = g["max_ts"] if part["max_ts"] is None else max(part["max_ts"], g["max_ts"])
    return per_partition, per_hour, reasons


def _iso(value: Any) -> str | None:
    """Spark hands out naive datetimes in the session zone (UTC): make them explicit."""
    if value is None:
        return None
    return str(value.replace(tzinfo=UTC).isoformat() if value.tzinfo is None else value.isoformat())


def reconcile(
    plan: Plan, receipts: list[dict[str, Any]], per_partition: dict[int, dict[str, Any]]
) -> list[PartitionStats]:
    """read == rows + dirty + late per MQ partition, and every planned sub-range has a receipt."""
    from tidemark.source import DEFAULT_SUBRANGE, split_ranges

    expected = {
        (s.partition, s.start, s.end)
        for s in split_ranges([r.__dict__ for r in plan.ranges], DEFAULT_SUBRANGE)
    }
    seen = {(r["partition"], r["start"], r["end"]) for r in receipts}
    problems = [f"{plan.topic}[{p}] {s}..{e - 1}: no read receipt" for p, s, e in sorted(expected - seen)]
    stats = []
    for r in plan.ranges:
        read = sum(x["read"] for x in receipts if x["partition"] == r.partition)
        got = per_partition.get(r.partition, {})
        rows, dirty, late = (int(got.get(k) or 0) for k in ("rows", "dirty", "late"))
        if read != rows + dirty + late:
            problems.append(
                f"{plan.topic}[{r.partition}] offsets {r.start}..{r.end - 1}: "
                f"read {read} != rows {rows} + dirty {dirty} + late {late}"
            )
        stats.append(
            PartitionStats(
                partition=r.partition,
                read=read,
                rows=rows,
                dirty=dirty,
                late=late,
                min_event_time=_iso(got.get("min_ts")),
                max_event_time=_iso(got.get("max_ts")),
            )
        )
    if problems:
        raise ReconciliationError(
            f"{plan.table} batch {plan.batch_id} (run {plan.run_id}) not committed: " + "; ".join(problems)
        )
    return stats


def read_and_stage(
    spark: SparkSession,
    *,
    config: TableConfig,
    plan: Plan,
    publisher: Publisher,
    kafka_conf: dict[str, Any],
    state: LogState,
    stopwatch: Stopwatch,
) -> Staged:
    """Read the plan's ranges, classify, stage rows and dirty records; return reconciled stats.

    Tables without data-derived partition columns stage in the read tasks themselves
    (``staging.py``); the others go through a Spark frame, because bounding partition values
    needs the whole batch (``cardinality.py``)."""
    from tidemark.source import read_ranges, read_receipts, stage_ranges
    from tidemark.staging import staged_rows
    from tidemark.transform import ClassifySpec

    receipts_dir = publisher.attempt_dir / "receipts"
    spec = ClassifySpec.of(
        config,
        topic=plan.topic,
        batch_id=plan.batch_id,
        run_id=plan.run_id,
        processing_time=datetime.fromisoformat(plan.processing_time),
        sealed_through=datetime.fromisoformat(plan.sealed_through) if plan.sealed_through else None,
    )
    ranges = [r.__dict__ for r in plan.ranges]
    admitted: cardinality.PartitionValues = {}
    if config.partitioning.columns:
        groups, admitted = _stage_with_spark(
            read_ranges(spark, plan.topic, ranges, kafka_conf=kafka_conf, receipts=receipts_dir, spec=spec),
            config,
            publisher,
            state,
            stopwatch,
        )
    else:
        with stopwatch.phase("read_stage"):  # the tasks read, classify and write
            groups = stage_ranges(
                spark,
                plan.topic,
                ranges,
                kafka_conf=kafka_conf,
                receipts=receipts_dir,
                spec=spec,
                staging=publisher.attempt_dir,
            )
            crash_point("after_staging")
    with stopwatch.phase("reconcile"):
        per_partition, per_hour, reasons = fold_stats(groups)
        stats = reconcile(plan, read_receipts(receipts_dir), per_partition)
        _check_files(plan, staged_rows(publisher.attempt_dir), stats)
    return Staged(stats, per_hour, reasons, admitted)


def _stage_with_spark(
    classified: Any, config: TableConfig, publisher: Publisher, state: LogState, stopwatch: Stopwatch
) -> tuple[list[Any], cardinality.PartitionValues]:
    """Bound partition values over the whole batch, then write rows, late rows and dirty
    records with Spark; return the grouped counts and the values this batch admitted."""
    from pyspark import StorageLevel

    from tidemark.transform import dirty_rows, good_rows, late_rows, partition_columns

    parsed = classified.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with stopwatch.phase("read_stage"):  # the first action reads the broker
            known = state.partition_values
            candidates = cardinality.candidate_values(parsed, config, known)
            admitted = cardinality.admit(known, candidates, config.partitioning.max_values_per_column)
            bounded = cardinality.apply_bound(parsed, config, cardinality.merge(known, admitted))
            parts = partition_columns(config)
            good_rows(bounded, config).write.partitionBy(*parts).parquet(str(publisher.attempt_dir / "rows"))
            late_rows(bounded, config).write.partitionBy(*parts).parquet(str(publisher.attempt_dir / "late"))
            dirty_rows(bounded).write.parquet(str(publisher.attempt_dir / "dirty"))
            crash_point("after_staging")
        with stopwatch.phase("reconcile"):
            return _grouped_stats(bounded, config), admitted
    finally:
        parsed.unpersist()


def _check_files(plan: Plan, in_files: dict[str, int], stats: list[PartitionStats]) -> None:
    """The staged files' footers hold exactly the rows, late rows and dirty records counted."""
    counted = {
        "rows": sum(s.rows for s in stats),
        "late": sum(s.late for s in stats),
        "dirty": sum(s.dirty for s in stats),
    }
    if in_files != counted:
        raise ReconciliationError(
            f"{plan.table} batch {plan.batch_id} (run {plan.run_id}) not committed: staged files hold "
            f"{in_files} but the tasks counted {counted}; offsets {plan.describe()}"
        )


def run_dump(
    spark: SparkSession | None,
    config: TableConfig,
    settings: Settings,
    run_id: str,
    processing_time: datetime,
) -> DumpResult:
    """Run (or finish, or confirm) the batch of ``run_id``. Safe to call any number of times."""
    commit_log = CommitLog(settings.state_location, config.table)
    layout = Layout(settings, config.table)
    kafka_conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
    log.info("%s: dump for run %s, broker %s", config.table, run_id, masked(kafka_conf))
    watch = Stopwatch()
    with TableLock(settings.state_location, config.table).hold(run_id):
        with watch.phase("plan"):
            bound = commit_log.batch_of_run(run_id)
            done = commit_log.commit(bound) if bound is not None else None
            if done is None:
                plan = plan_batch(config, commit_log, run_id, processing_time.isoformat(), kafka_conf)
                crash_point("after_plan")
                done = commit_log.commit(plan.batch_id)
        if done is not None:
            log.info(
                "%s: batch %s already committed (run %s): nothing to do",
                config.table,
                done.batch_id,
                done.run_id,
            )
            Publisher(layout, done.batch_id).cleanup()
            _commit_group(config, kafka_conf, done)
            return _result(done, "already_committed")
        publisher = Publisher(layout, plan.batch_id)
        with watch.phase("rollback"):
            publisher.rollback()
            state = commit_log.state()  # everything before this batch: the lock is held
        if plan.records_planned:
            if spark is None:
                raise ValueError("a Spark session is required to read a non-empty batch")
            staged = read_and_stage(
                spark,
                config=config,
                plan=plan,
                publisher=publisher,
                kafka_conf=kafka_conf,
                state=state,
                stopwatch=watch,
            )
        else:
            staged = Staged(
                [PartitionStats(r.partition, 0, 0, 0) for r in plan.ranges], {"rows": {}, "late": {}}, {}, {}
            )
        stats, per_hour, reasons = staged.stats, staged.per_hour, staged.reasons
        read = sum(s.read for s in stats)
        dirty = sum(s.dirty for s in stats)
        ratio = dirty / read if read else 0.0
        if ratio > config.dirty.max_dirty_ratio:
            raise DirtyRatioExceededError(
                f"{config.table} batch {plan.batch_id} (run {run_id}): {dirty} of {read} records dirty "
                f"({ratio:.1%} > max_dirty_ratio {config.dirty.max_dirty_ratio:.1%}); reasons {reasons}; "
                f"offsets {plan.describe()}; nothing committed"
            )
        with watch.phase("publish"):
            files = publisher.publish()
        crash_point("before_commit_record")
        with watch.phase("commit"):
            watermarks, ready = _watermarks(config, state, plan, stats)
            commit = Commit(
                table=config.table,
                batch_id=plan.batch_id,
                run_id=plan.run_id,
                committed_by_run=run_id,
                topic=plan.topic,
                processing_time=plan.processing_time,
                ranges=plan.ranges,
                files=tuple(files),
                rows_per_partition=per_hour["rows"],
                partitions=tuple(stats),
                dirty=dirty,
                rows=sum(s.rows for s in stats),
                late=sum(s.late for s in stats),
                late_per_partition=per_hour["late"],
                watermarks=watermarks,
                ready=ready,
                partition_values=staged.partition_values,
                extra={"dirty_reasons": reasons},
            )
            commit_log.write_commit(commit)
        publisher.cleanup()
        log.info(
            "%s: committed batch %s (run %s): read %s, rows %s, dirty %s %s, late %s, files %s, hours %s; "
            "global ready time %s (held by partition %s, idle %s); seconds %s",
            config.table,
            commit.batch_id,
            run_id,
            read,
            commit.rows,
            dirty,
            reasons,
            commit.late,
            len(files),
            sorted(per_hour["rows"]),
            ready.time,
            ready.holding,
            list(ready.idle),
            watch.rounded(),
        )
    crash_point("before_group_commit")
    _commit_group(config, kafka_conf, commit)
    return replace(_result(commit, "committed"), timings=watch.rounded())


def _watermarks(
    config: TableConfig, state: LogState, plan: Plan, stats: list[PartitionStats]
) -> tuple[tuple[PartitionWatermark, ...], ReadyTime]:
    """Advance the watermarks from the last committed state with what this batch saw."""
    processing_time = datetime.fromisoformat(plan.processing_time)
    if state.ready is not None:  # processing time never goes back, even on a backfilled run
        processing_time = max(processing_time, datetime.fromisoformat(state.ready.processing_time))
    by_partition = {s.partition: s for s in stats}
    observed = [
        BatchObservation(r.partition, r.end, by_partition[r.partition].max_event_time) for r in plan.ranges
    ]
    wm = advance(
        state.watermarks,
        observed,
        processing_time=processing_time,
        max_out_of_orderness=config.watermark.max_out_of_orderness,
    )
    ready = ready_time(
        wm,
        processing_time=processing_time,
        idle_timeout=config.watermark.idle_timeout,
        previous=state.ready.instant if state.ready else None,
    )
    return tuple(wm[p] for p in sorted(wm)), ready


def _commit_group(config: TableConfig, kafka_conf: dict[str, Any], commit: Commit) -> None:
    if commit.ranges:
        commit_group_offsets(kafka_conf, config.consumer_group, commit.topic, commit.end_offsets)


def _result(commit: Commit, status: str) -> DumpResult:
    return DumpResult(
        table=commit.table,
        batch_id=commit.batch_id,
        run_id=commit.committed_by_run,
        status=status,
        read=sum(p.read for p in commit.partitions),
        rows=commit.rows,
        dirty=commit.dirty,
        offsets={r.partition: [r.start, r.end] for r in commit.ranges},
    )
