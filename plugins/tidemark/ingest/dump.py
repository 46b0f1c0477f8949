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
8. move the late rows and dirty records to their visible directories (``BatchPublisher.finish``,
   rolled forward by the next dump or seal if this job dies first);
9. commit consumer-group offsets (lag monitoring only), then bring the table's fresh read
   in step (``tidemark.fresh``); a failure of either is a warning.
A crash anywhere before 7 is undone by the retry's step 3; after 7 the retry finishes 8 and 9.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import DirtyRatioExceededError, LeaseLostError, OffsetsLostToRetentionError
from tidemark.faults import crash_point
from tidemark.fresh import fresh_read, sync_fresh
from tidemark.ingest.batch_time import batch_watermarks
from tidemark.ingest.counts import FoldedCounts
from tidemark.ingest.group_offsets import record_group_commit
from tidemark.ingest.identity import named_read_failure, still_bound
from tidemark.ingest.kafka import client_properties
from tidemark.ingest.planner import plan_batch
from tidemark.ingest.publishers import publisher
from tidemark.ingest.registry import registry_failures
from tidemark.ingest.replay import ReplayRequest, plan_replay, replay_and_stage
from tidemark.ingest.resolve import decide
from tidemark.ingest.staged import Staged, read_and_stage
from tidemark.masking import masked
from tidemark.settings import Settings
from tidemark.state.batches import Commit, MqPartitionStats, Plan
from tidemark.state.locks import Lease
from tidemark.state.mode import BATCH
from tidemark.stopwatch import Stopwatch
from tidemark.table import Table

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
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase of this attempt

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


class DumpSteps:
    """One attempt at a run's batch, as the steps of the module doc, under the table's lock:
    ``plan`` (or find the run's commit), ``roll_back`` what an earlier attempt left, ``stage``
    the planned records, ``check`` the dirty ratio, ``publish`` the files, ``commit`` the
    record, ``finish`` (late rows and dirty records visible); ``run_dump`` sequences them."""

    def __init__(
        self,
        spark: SparkSession | None,
        table: Table,
        *,
        lease: Lease,
        kafka_conf: dict[str, Any],
        watch: Stopwatch,
        run_id: str,
    ) -> None:
        self.spark = spark
        self.table = table
        self.config = table.config
        self.table_state = table.state
        self.commit_log = table.state.commit_log
        self.layout = table.layout
        self.lease = lease
        self.kafka_conf = kafka_conf
        self.watch = watch
        self.run_id = run_id
        self.fresh = fresh_read(table)  # kept in step after the commit (step 9)

    def plan(
        self,
        processing_time: datetime,
        *,
        planned_at: datetime | None,
        replay: ReplayRequest | None,
        until: Mapping[int, int] | None,
        writer: str,
    ) -> Commit | None:
        """The run's plan, made and persisted once (a retry reuses it); or the run's commit,
        when the batch is committed already."""
        commit_log = self.commit_log
        with self.watch.phase("plan"):
            bound = commit_log.batch_of_run(self.run_id)
            done = commit_log.commit(bound) if bound is not None else None
            if done is None and replay is not None and bound is None:
                self._plan = plan_replay(self.config, self.layout, self.table_state, self.run_id, replay)
            elif done is None:
                self.table_state.writer.require(writer)

                def plan() -> Plan:
                    return plan_batch(
                        self.config,
                        self.table_state,
                        self.run_id,
                        processing_time.isoformat(),
                        self.kafka_conf,
                        planned_at=planned_at.isoformat() if planned_at else None,
                        until=until,
                    )

                try:
                    self._plan = plan()
                except OffsetsLostToRetentionError as lost:
                    if lost.pending_batch is None or self.config.source.on_data_loss != "record_and_continue":
                        raise
                    self._record_loss(lost, processing_time)
                    self._plan = plan()
                crash_point("after_plan")
                done = commit_log.commit(self._plan.batch_id)
        return done

    def _record_loss(self, lost: OffsetsLostToRetentionError, at: datetime) -> None:
        """``on_data_loss: record_and_continue`` and retention inside a planned batch: the
        batch is closed with exactly the deleted offsets recorded as lost (the decision
        ``accept-loss`` would record, audited as tidemark's), and planned again."""
        log.warning(
            "%s: %s; recording the loss (source.on_data_loss: record_and_continue)", self.config.table, lost
        )
        decide(
            self.table,
            self.lease,
            action="accept-loss",
            reason=f"source.on_data_loss: record_and_continue: {lost}",
            by="tidemark",
            at=at,
        )

    def confirm(self, done: Commit) -> None:
        """A committed batch: finish what its attempt may have left unfinished (step 8)."""
        log.info(
            "%s: batch %s already committed (run %s): nothing to do",
            self.config.table,
            done.batch_id,
            done.run_id,
        )
        self.lease.check()  # finishing shows files: only the holder does it
        publisher(self.layout, done.batch_id).finish(done.files)

    def roll_back(self) -> None:
        """Finish the previous batch if its job died after its commit record, then undo what an
        earlier attempt of this batch left; the state of everything before it, read once."""
        plan, commit_log = self._plan, self.commit_log
        # a plan made before a schema change is read and written by its own schema version
        self.config = self.table_state.schema_history.config_at(self.config, plan.schema_version)
        self.lease.check()  # a job paused past its lease deletes and shows nothing
        if plan.batch_id > 0:  # a crash right after the previous commit record: finish it first
            previous = commit_log.commit(plan.batch_id - 1)
            publisher(self.layout, plan.batch_id - 1).finish(previous.files if previous else ())
        self.publisher = publisher(self.layout, plan.batch_id, self.lease.token)
        with self.watch.phase("rollback"):
            self.lease.check()
            if commit_log.commit(plan.batch_id) is not None:  # committed by the lease's next holder
                raise LeaseLostError(
                    f"{self.config.table}: batch {plan.batch_id} (run {self.run_id}) was committed by "
                    "another job while this one was paused; nothing rolled back or made visible by this attempt"
                )
            self.publisher.rollback()
            self.state = commit_log.state()  # everything before this batch: the lock is held

    def stage(self) -> Staged:
        """Read (or replay) exactly the planned records, classify and stage them, reconciled."""
        plan, config = self._plan, self.config
        if not plan.replay and not plan.records_planned:
            return Staged(
                [MqPartitionStats(r.mq_partition, 0, 0, 0) for r in plan.ranges], FoldedCounts(), {}
            )
        if self.spark is None:
            needed = "replay dirty records" if plan.replay else "read a non-empty batch"
            raise ValueError(f"a Spark session is required to {needed}")
        with registry_failures(config.table), named_read_failure(config, plan, self.kafka_conf):
            if plan.replay:
                return replay_and_stage(
                    self.spark,
                    config=config,
                    plan=plan,
                    publisher=self.publisher,
                    state=self.state,
                    stopwatch=self.watch,
                )
            return read_and_stage(
                self.spark,
                config=config,
                plan=plan,
                publisher=self.publisher,
                kafka_conf=self.kafka_conf,
                state=self.state,
                stopwatch=self.watch,
                meanwhile=self.fresh.warm_up if self.fresh is not None else None,
            )

    def check(self, staged: Staged) -> None:
        """The dirty ratio: over the table's maximum, the batch fails unless an operator
        accepted it (``tidemark resolve``); a replay's records were dirty already."""
        plan, config, stats = self._plan, self.config, staged.stats
        read, dirty = sum(s.read for s in stats), sum(s.dirty for s in stats)
        ratio = dirty / read if read else 0.0
        if ratio <= config.dirty.max_dirty_ratio or plan.replay:
            return
        accepted = self.table_state.audit.accepted(plan.batch_id)
        if accepted is None:
            raise DirtyRatioExceededError(
                f"{config.table} batch {plan.batch_id} (run {self.run_id}): {dirty} of {read} records dirty "
                f"({ratio:.1%} > max_dirty_ratio {config.dirty.max_dirty_ratio:.1%}); reasons "
                f"{staged.counts.reasons}; offsets {plan.describe()}; nothing committed. Every run completes "
                f"this batch first: fix the producer or the schema, or decide: tidemark resolve --table "
                f'{config.table} --action accept|skip --reason "..."'
            )
        log.warning(
            "%s batch %s: %s of %s records dirty (%.1f%% > max_dirty_ratio), committed as decided: %s",
            config.table,
            plan.batch_id,
            dirty,
            read,
            ratio * 100,
            accepted.describe(),
        )

    def publish(self) -> list[str]:
        """The staged files under their final names, hidden until the commit record."""
        with self.watch.phase("publish"):
            self.lease.check()  # a job paused past its lease publishes nothing
            files = self.publisher.publish(retire=self._plan.replayed_batches)
        crash_point("before_commit_record")
        return files

    def commit(self, staged: Staged, files: list[str]) -> Commit:
        """The commit record, create-only: the batch is visible to sealing from here."""
        plan, config, stats, folded = self._plan, self.config, staged.stats, staged.counts
        with self.watch.phase("commit"):
            # a replay reads no offsets: the watermarks and the ready time stay as they are
            watermarks, ready = (
                batch_watermarks(config, self.state, plan, stats) if not plan.replay else ((), None)
            )
            commit = Commit(
                table=config.table,
                batch_id=plan.batch_id,
                run_id=plan.run_id,
                committed_by_run=self.run_id,
                topic=plan.topic,
                processing_time=plan.processing_time,
                ranges=plan.ranges,
                files=tuple(files),
                rows_per_hour=folded.rows_per_hour,
                mq_partitions=tuple(stats),
                dirty=sum(s.dirty for s in stats),
                rows=sum(s.rows for s in stats),
                late=sum(s.late for s in stats),
                late_per_hour=folded.late_per_hour,
                watermarks=watermarks,
                ready=ready,
                partition_values=staged.partition_values,
                extra={
                    "dirty_reasons": folded.reasons,
                    "tombstones": sum(s.tombstones for s in stats),
                    **({"topic_id": plan.topic_id} if plan.topic_id else {}),
                    **staged.extra,
                },
            )
            self.lease.check()
            still_bound(config, plan, self.kafka_conf, what=f"batch {plan.batch_id} before its commit record")
            self.commit_log.write_commit(commit)
        crash_point("after_commit_record")
        return commit

    def finish(self, commit: Commit, staged: Staged) -> None:
        """Late rows and dirty records to their visible directories (step 8)."""
        self.publisher.finish(commit.files)
        ready = commit.ready
        log.info(
            "%s: committed batch %s (run %s): read %s, rows %s, dirty %s %s, tombstones %s, late %s, files %s, "
            "hours %s; global ready time %s; seconds %s",
            self.config.table,
            commit.batch_id,
            self.run_id,
            sum(s.read for s in staged.stats),
            commit.rows,
            commit.dirty,
            staged.counts.reasons,
            commit.tombstones,
            commit.late,
            len(commit.files),
            sorted(staged.counts.rows_per_hour),
            f"{ready.time} (held by partition {ready.holding}, idle {list(ready.idle)})"
            if ready
            else "unchanged (a replay)",
            self.watch.rounded(),
        )


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
    table = Table.open(config, settings)
    table.check_layout()
    kafka_conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
    log.info("%s: dump for run %s, broker %s", config.table, run_id, masked(kafka_conf))
    watch = Stopwatch()
    with table.state.lock().hold(run_id, wait=lock_wait) as lease:
        steps = DumpSteps(
            spark,
            table,
            lease=lease,
            kafka_conf=kafka_conf,
            watch=watch,
            run_id=run_id,
        )
        done = steps.plan(processing_time, planned_at=planned_at, replay=replay, until=until, writer=writer)
        if done is not None:
            steps.confirm(done)
            record_group_commit(config, settings, kafka_conf, done)
            sync_fresh(table, f"dump run {run_id}: batch {done.batch_id}, committed before", steps.fresh)
            return _result(done, "already_committed")
        steps.roll_back()
        staged = steps.stage()
        steps.check(staged)
        files = steps.publish()
        commit = steps.commit(staged, files)
        steps.finish(commit, staged)
    crash_point("before_group_commit")
    record_group_commit(config, settings, kafka_conf, commit)
    sync_fresh(table, f"dump run {run_id}: batch {commit.batch_id}", steps.fresh)
    return replace(_result(commit, "committed"), timings=watch.rounded())


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
