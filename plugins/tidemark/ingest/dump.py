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
6. publish: write the manifest of deterministic target names, then move the rows into the
   hidden ``_open`` directory (after checking the lock's lease);
7. write the commit record (create-only): the batch is now visible to sealing;
8. move the late rows and dirty records to their visible directories (``Publisher.finish``,
   rolled forward by the next dump or seal if this job dies first);
9. commit consumer-group offsets (lag monitoring only; a failure is a warning).
A crash anywhere before 7 is undone by the retry's step 3; after 7 the retry finishes step 8.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import DirtyRatioExceededError, LeaseLostError
from tidemark.faults import crash_point
from tidemark.ingest.counts import FoldedCounts, check_files, fold_stats, reconcile
from tidemark.ingest.kafka import client_properties, commit_group_offsets
from tidemark.ingest.planner import plan_batch
from tidemark.ingest.publish import Publisher
from tidemark.ingest.registry import registry_failures
from tidemark.ingest.replay import ReplayRequest, plan_replay, replay_and_stage
from tidemark.ingest.staged import Staged, stage_classified
from tidemark.masking import masked
from tidemark.settings import Settings
from tidemark.state.batches import Commit, MqPartitionStats, Plan
from tidemark.state.commitlog import CommitLog, LogState
from tidemark.state.layout import Layout
from tidemark.state.mode import BATCH
from tidemark.state.partition_values import PartitionValues
from tidemark.state.storage import replace_atomically
from tidemark.stopwatch import Stopwatch
from tidemark.table_state import TableState
from tidemark.time.watermarks import BatchObservation, MqWatermark, ReadyTime, advance, ready_time

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
    late: int = 0
    offsets: dict[int, list[int]] = field(default_factory=dict)
    tombstones: int = 0  # messages without a value: read == rows + dirty + tombstones + late
    # seconds per phase of this attempt (plan, rollback, read_stage, reconcile, publish, commit)
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


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
    from tidemark.ingest.reader import read_receipts
    from tidemark.ingest.source import read_ranges, stage_ranges
    from tidemark.ingest.spec import ClassifySpec
    from tidemark.ingest.staging import staged_rows
    from tidemark.tablefs import Store

    targets = publisher.staging_targets()
    spec = ClassifySpec.of_plan(config, plan)
    ranges = [r.__dict__ for r in plan.ranges]
    admitted: PartitionValues = {}
    if config.partitioning.columns:
        receipts = Store(targets.store.uri(targets.receipts), targets.store.s3)
        counts, admitted = stage_classified(
            read_ranges(spark, plan.topic, ranges, kafka_conf=kafka_conf, receipts=receipts, spec=spec),
            spec,
            config=config,
            publisher=publisher,
            state=state,
            stopwatch=stopwatch,
        )
    else:
        with stopwatch.phase("read_stage"):  # the tasks read, classify and write
            counts = stage_ranges(
                spark,
                plan.topic,
                ranges,
                kafka_conf=kafka_conf,
                spec=spec,
                targets=targets,
            )
            crash_point("after_staging")
    with stopwatch.phase("reconcile"):
        folded = fold_stats(counts)
        stats = reconcile(plan, read_receipts(targets.store, targets.receipts), folded.per_mq_partition)
        check_files(plan, staged_rows(publisher.store, publisher.written()), stats)
    return Staged(stats, folded, admitted)


def run_dump(
    spark: SparkSession | None,
    config: TableConfig,
    settings: Settings,
    run_id: str,
    processing_time: datetime,
    *,
    planned_at: datetime | None = None,
    replay: ReplayRequest | None = None,
    until: Mapping[int, int] | None = None,
    writer: str = BATCH,
    lock_wait: float | None = None,
) -> DumpResult:
    """Run (or finish, or confirm) the batch of ``run_id``. Safe to call any number of times.

    ``processing_time`` is the run's logical time (Airflow's data interval end); ``planned_at``
    is the wall clock the job started at (its entry point reads it), recorded in a new plan to
    judge future event times. A retry reuses the plan, so both are decided once. With
    ``replay``, a new plan replays dirty records instead of reading offsets (``replay.py``).
    An offset-reading batch runs only while ``writer`` (``batch`` or the ``stream``, whose
    micro-batch ends are ``until``) is the table's writer (``state/mode.py``). ``lock_wait``:
    seconds to wait for the batch lock (default ``TIDEMARK_LOCK_WAIT_S``)."""
    table_state = TableState(settings.state_location, config.table)
    commit_log = table_state.commit_log
    layout = Layout(settings, config.table)
    kafka_conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
    log.info("%s: dump for run %s, broker %s", config.table, run_id, masked(kafka_conf))
    watch = Stopwatch()
    with table_state.lock().hold(run_id, wait=lock_wait) as lease:
        with watch.phase("plan"):
            bound = commit_log.batch_of_run(run_id)
            done = commit_log.commit(bound) if bound is not None else None
            if done is None and replay is not None and bound is None:
                plan = plan_replay(config, layout, table_state, run_id, replay)
            elif done is None:
                table_state.writer.require(writer)
                plan = plan_batch(
                    config,
                    commit_log,
                    run_id,
                    processing_time.isoformat(),
                    kafka_conf,
                    planned_at=planned_at.isoformat() if planned_at else None,
                    until=until,
                )
                crash_point("after_plan")
                done = commit_log.commit(plan.batch_id)
        if done is not None:
            log.info(
                "%s: batch %s already committed (run %s): nothing to do",
                config.table,
                done.batch_id,
                done.run_id,
            )
            lease.check()  # finishing shows files: only the holder does it
            Publisher(layout, done.batch_id).finish(done.files)
            _commit_group(config, settings, kafka_conf, done)
            return _result(done, "already_committed")
        # a plan made before a schema change is read and written by its own schema version
        config = table_state.schema_history.config_at(config, plan.schema_version)
        lease.check()  # a job paused past its lease deletes and shows nothing
        if plan.batch_id > 0:  # a crash right after the previous commit record: finish it first
            previous = commit_log.commit(plan.batch_id - 1)
            Publisher(layout, plan.batch_id - 1).finish(previous.files if previous else ())
        publisher = Publisher(layout, plan.batch_id, lease.token)
        with watch.phase("rollback"):
            lease.check()
            if commit_log.commit(plan.batch_id) is not None:  # committed by the lease's next holder
                raise LeaseLostError(
                    f"{config.table}: batch {plan.batch_id} (run {run_id}) was committed by another job "
                    "while this one was paused; nothing rolled back or made visible by this attempt"
                )
            publisher.rollback()
            state = commit_log.state()  # everything before this batch: the lock is held
        if plan.replay:
            if spark is None:
                raise ValueError("a Spark session is required to replay dirty records")
            with registry_failures(config.table):
                staged = replay_and_stage(
                    spark, config=config, plan=plan, publisher=publisher, state=state, stopwatch=watch
                )
        elif plan.records_planned:
            if spark is None:
                raise ValueError("a Spark session is required to read a non-empty batch")
            with registry_failures(config.table):
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
                [MqPartitionStats(r.mq_partition, 0, 0, 0) for r in plan.ranges], FoldedCounts(), {}
            )
        stats, folded = staged.stats, staged.counts
        reasons = folded.reasons
        read = sum(s.read for s in stats)
        dirty = sum(s.dirty for s in stats)
        ratio = dirty / read if read else 0.0
        over = ratio > config.dirty.max_dirty_ratio and not plan.replay  # a replay's were dirty already
        accepted = table_state.audit.accepted(plan.batch_id) if over else None
        if accepted is not None:
            log.warning(
                "%s batch %s: %s of %s records dirty (%.1f%% > max_dirty_ratio), committed as decided: %s",
                config.table,
                plan.batch_id,
                dirty,
                read,
                ratio * 100,
                accepted.describe(),
            )
        elif over:
            raise DirtyRatioExceededError(
                f"{config.table} batch {plan.batch_id} (run {run_id}): {dirty} of {read} records dirty "
                f"({ratio:.1%} > max_dirty_ratio {config.dirty.max_dirty_ratio:.1%}); reasons {reasons}; "
                f"offsets {plan.describe()}; nothing committed. Every run completes this batch first: fix "
                f"the producer or the schema, or decide: tidemark resolve --table {config.table} "
                '--action accept|skip --reason "..."'
            )
        with watch.phase("publish"):
            lease.check()  # a job paused past its lease publishes nothing
            files = publisher.publish(retire=plan.replayed_batches)
        crash_point("before_commit_record")
        with watch.phase("commit"):
            # a replay reads no offsets: the watermarks and the ready time stay as they are
            watermarks, ready = _watermarks(config, state, plan, stats) if not plan.replay else ((), None)
            commit = Commit(
                table=config.table,
                batch_id=plan.batch_id,
                run_id=plan.run_id,
                committed_by_run=run_id,
                topic=plan.topic,
                processing_time=plan.processing_time,
                ranges=plan.ranges,
                files=tuple(files),
                rows_per_hour=folded.rows_per_hour,
                mq_partitions=tuple(stats),
                dirty=dirty,
                rows=sum(s.rows for s in stats),
                late=sum(s.late for s in stats),
                late_per_hour=folded.late_per_hour,
                watermarks=watermarks,
                ready=ready,
                partition_values=staged.partition_values,
                extra={
                    "dirty_reasons": reasons,
                    "tombstones": sum(s.tombstones for s in stats),
                    **({"topic_id": plan.topic_id} if plan.topic_id else {}),
                    **staged.extra,
                },
            )
            lease.check()
            commit_log.write_commit(commit)
        crash_point("after_commit_record")
        publisher.finish(commit.files)
        log.info(
            "%s: committed batch %s (run %s): read %s, rows %s, dirty %s %s, tombstones %s, late %s, files %s, "
            "hours %s; "
            "global ready time %s; seconds %s",
            config.table,
            commit.batch_id,
            run_id,
            read,
            commit.rows,
            dirty,
            reasons,
            commit.tombstones,
            commit.late,
            len(files),
            sorted(folded.rows_per_hour),
            f"{ready.time} (held by partition {ready.holding}, idle {list(ready.idle)})"
            if ready
            else "unchanged (a replay)",
            watch.rounded(),
        )
    crash_point("before_group_commit")
    _commit_group(config, settings, kafka_conf, commit)
    return replace(_result(commit, "committed"), timings=watch.rounded())


def _watermarks(
    config: TableConfig, state: LogState, plan: Plan, stats: list[MqPartitionStats]
) -> tuple[tuple[MqWatermark, ...], ReadyTime]:
    """Advance the watermarks from the last committed state with what this batch saw."""
    processing_time = datetime.fromisoformat(plan.processing_time)
    if state.ready is not None:  # processing time never goes back, even on a backfilled run
        processing_time = max(processing_time, datetime.fromisoformat(state.ready.processing_time))
    by_partition = {s.mq_partition: s for s in stats}
    observed = [
        BatchObservation(r.mq_partition, r.end, by_partition[r.mq_partition].max_event_time)
        for r in plan.ranges
    ]
    wm = advance(
        state.watermarks,
        observed,
        processing_time=processing_time,
        max_out_of_orderness=config.watermark.max_out_of_orderness,
    )
    watermark = config.watermark
    ready = ready_time(
        wm,
        processing_time=processing_time,
        idle_timeout=watermark.idle_timeout,
        previous=state.ready.instant if state.ready else None,
        # retired: the last record's hour (watermark + disorder = its time) seals, no later one
        retired_margin=watermark.max_out_of_orderness + timedelta(hours=1) + watermark.commit_delay
        if config.source.retired
        else None,
    )
    return tuple(wm[p] for p in sorted(wm)), ready


def _commit_group(
    config: TableConfig, settings: Settings, kafka_conf: dict[str, Any], commit: Commit
) -> None:
    """Consumer-group offsets for lag monitoring, after the commit record: a failure (an ACL, a
    group shared with a live consumer) is a warning and the ``group_commit_failed`` gauge, never
    a failed batch; the outcome is recorded beside the commit log for the metrics task."""
    if not commit.ranges:
        return
    if config.source.retired:  # the topic is gone: nothing to commit offsets of
        return
    record = CommitLog(settings.state_location, config.table).group_commit_file
    try:
        crash_point("group_commit")
        moved = commit_group_offsets(kafka_conf, config.consumer_group, commit.topic, commit.end_offsets)
    except Exception as exc:  # monitoring only: whatever the client raises, the batch stands
        log.warning(
            "%s: batch %s is committed, but committing offsets %s of consumer group %s failed (lag "
            "monitoring only; the commit log is the truth): %s",
            config.table,
            commit.batch_id,
            commit.end_offsets,
            config.consumer_group,
            exc,
        )
        replace_atomically(record, {"batch_id": commit.batch_id, "failed": True, "error": str(exc)[:500]})
        return
    replace_atomically(record, {"batch_id": commit.batch_id, "failed": False, "committed": moved})


def _result(commit: Commit, status: str) -> DumpResult:
    return DumpResult(
        table=commit.table,
        batch_id=commit.batch_id,
        run_id=commit.committed_by_run,
        status=status,
        read=sum(p.read for p in commit.mq_partitions),
        rows=commit.rows,
        dirty=commit.dirty,
        late=commit.late,
        offsets={r.mq_partition: [r.start, r.end] for r in commit.ranges},
        tombstones=commit.tombstones,
    )


def replay_dirty(
    spark: SparkSession, config: TableConfig, settings: Any, run_id: str, request: ReplayRequest
) -> DumpResult:
    """Replay dirty records as the batch of ``run_id`` (idempotent per run id): see
    ``replay.py``'s module doc."""
    return run_dump(spark, config, settings, run_id, request.at, planned_at=request.at, replay=request)
