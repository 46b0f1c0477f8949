"""The continuous writer: a Structured Streaming query whose micro-batches run the dump
protocol, and which seals hours as the ready time passes them.

Exactly once across restarts (the seeds' recommit problem) rests on the commit log, not on
the query's checkpoint:

- micro-batch N runs as the dump of run id ``stream-<query id>-<N>``; the query id is kept in
  the checkpoint, so a restarted query that runs N again (Spark re-runs a micro-batch whose
  offsets it logged but whose completion it did not) finds the run's commit and does nothing
  but finish it (``already_committed``): a batch the commit log has and the checkpoint does
  not is never written twice;
- a batch the checkpoint has and the commit log does not (killed before the commit record)
  is the dump's interrupted attempt: the same run id reuses its plan, rolls the attempt back
  and commits it;
- every plan starts at the commit log's ends and only ends at the micro-batch's ends, so a
  checkpoint behind the log (the batch DAG wrote in between) reads nothing twice, and one
  ahead of it (a micro-batch that committed nothing) reads nothing less.

Between micro-batches, hours whose end + ``commit_delay`` the ready time passed are sealed by
the seal job's own ``Sealer`` (same journal, quality gate, registration), and once when the
stream starts, before its first micro-batch: a run killed inside its seal leaves hours due that
a catch-up run with nothing new to read would stop without sealing. Only the table's
writer runs (``state/mode.py``): a switch to batch stops the stream after its current
micro-batch. The ``stream`` lock keeps a second stream of the table from starting, and a
status record (``<state>/<table>/stream/status.json``) tells ``tidemark status``, the
health page, the metrics and the Airflow sensor how it is doing.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import BatchConflictError, QualityGateError, TidemarkError, WriterModeError
from tidemark.faults import crash_point
from tidemark.ingest.dump import run_dump
from tidemark.ingest.kafka import client_properties, partition_offsets
from tidemark.ingest.planner import next_ranges
from tidemark.seal.due import hours_to_seal
from tidemark.seal.sealing import Sealer
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.locks import Lease, lease_duration
from tidemark.state.mode import STREAM
from tidemark.stream.status import (
    STREAM_LOCK,
    Progress,
    StreamError,
    StreamStatus,
    checkpoint_agreement,
    checkpoint_location,
)
from tidemark.table import Table
from tidemark.tablefs import Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
# a micro-batch that adopted a pending plan (the batch DAG's unfinished batch) needs a second
# dump to reach its own ends; more rounds than this mean something else moves the log
MAX_ROUNDS = 3
HEARTBEAT_EVERY_S = 5.0


class EpochRunner:
    """The ``foreachBatch`` function: one micro-batch = the dump of its ends, then the seal."""

    def __init__(
        self,
        spark: SparkSession,
        config: TableConfig,
        settings: Settings,
        *,
        checkpoint: str,
        clock: Clock,
        progress: Progress,
        status: StreamStatus,
        lease: Lease | None = None,
    ) -> None:
        self.spark = spark
        self.status = status
        self.lease = lease  # the stream lock: a stream paused past it writes nothing more
        self.config = config
        self.settings = settings
        self.checkpoint = checkpoint
        self.clock = clock
        self.progress = progress
        self.table = Table.open(config, settings)  # one handle for every micro-batch's seal
        self.state = self.table.state
        self.commit_log = self.state.commit_log
        self.stop_reason = ""
        self._query_id = ""
        # late rows a seal killed with the last run may not have registered: seal once at start
        self._late_unsealed = self.commit_log.state().late > 0

    def query_id(self) -> str:
        """The query's id from its checkpoint (kept across restarts, unlike the run id)."""
        if not self._query_id:
            metadata = Store.of(self.checkpoint).read_json("metadata")
            if not metadata:
                raise StreamError(
                    f"{self.config.table}: no query metadata in the checkpoint {self.checkpoint}"
                )
            self._query_id = str(metadata["id"])
        return self._query_id

    def __call__(self, frame: DataFrame, epoch: int) -> None:
        crash_point("stream_epoch_start")
        if self.lease is not None:
            self.lease.check()  # another stream took over while this one was paused: stop here
        if self.stop_reason:
            return  # the main loop stops the query; this micro-batch commits nothing
        ends = {int(r.mq_partition): int(r.end_offset) for r in frame.collect()}
        run_id = f"stream-{self.query_id()}-{epoch}"
        started = time.perf_counter()
        try:
            self._dump_until(run_id, ends)
        except WriterModeError as exc:
            self.stop_reason = str(exc)
            log.warning("%s: micro-batch %s not run, stopping the stream: %s", self.config.table, epoch, exc)
            return
        self.progress.last_epoch = epoch
        self.progress.dump_s = round(self.progress.dump_s + time.perf_counter() - started, 3)
        started = time.perf_counter()
        self.seal_if_due(run_id)
        self.progress.seal_s = round(self.progress.seal_s + time.perf_counter() - started, 3)
        self.status.write(self.progress.to_json(self.clock()))
        crash_point("stream_epoch_end")

    def _dump_until(self, run_id: str, ends: dict[int, int]) -> None:
        for round_ in range(MAX_ROUNDS):
            now = self.clock()
            result = run_dump(
                self.spark,
                self.config,
                self.settings,
                run_id if round_ == 0 else f"{run_id}.{round_}",
                now,
                planned_at=now,
                until=ends,
                writer=STREAM,
                # a rebuild swap, a release or an ingest seal holds the batch lock for seconds:
                # the micro-batch waits (logged) for up to a lease rather than killing the query
                lock_wait=lease_duration().total_seconds(),
            )
            self._count(result, now)
            committed = self.commit_log.state().end_offsets
            if all(committed.get(p, -1) >= end for p, end in ends.items()):
                return
        log.warning(
            "%s: run %s did not reach its ends %s after %s batches (the log is at %s); the next "
            "micro-batch goes on from there",
            self.config.table,
            run_id,
            ends,
            MAX_ROUNDS,
            self.commit_log.state().end_offsets,
        )

    def _count(self, result: Any, now: datetime) -> None:
        progress = self.progress
        progress.last_batch_id = result.batch_id
        if result.status == "committed":
            progress.batches += 1
            progress.records += result.read
            progress.rows += result.rows
            progress.dirty += result.dirty
            progress.last_commit_at = now.isoformat()
            progress.late += result.late
            self._late_unsealed = self._late_unsealed or result.late > 0

    def seal_if_due(self, run_id: str) -> None:
        """Seal (register, gate, amend or register late rows) when an hour is complete or late
        rows wait; a quarantined hour is reported, and the stream goes on."""

        state = self.commit_log.state()
        journal = self.state.journal.state()
        if not hours_to_seal(self.config, state, journal) and not self._late_unsealed:
            return
        seal_run = f"{run_id}-seal"
        try:
            with self.state.lock().hold(seal_run) as lease:
                result = Sealer(self.spark, self.table, seal_run, lease).run()
        except BatchConflictError as exc:  # another job's long step: seal at a later micro-batch
            log.warning("%s: sealing put off to the next micro-batch: %s", self.config.table, exc)
            return
        except QualityGateError as exc:
            self.progress.quarantined = sorted(set(self.progress.quarantined) | set(exc.failures))
            self.progress.message = str(exc)
            log.error(
                "%s: %s; the stream goes on (tidemark release registers the hour)", self.config.table, exc
            )
            return
        self._late_unsealed = False
        self.progress.sealed += result.sealed
        if result.sealed:
            log.info("%s: the stream sealed %s", self.config.table, result.sealed)


def _state_store_env() -> dict[str, str]:
    """The S3 settings of this process's environment, for the source's process."""
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}


def run_stream(
    spark: SparkSession,
    config: TableConfig,
    settings: Settings,
    run_id: str,
    *,
    clock: Clock,
    until_caught_up: bool = False,
    trigger_interval_s: float | None = None,
) -> dict[str, Any]:
    """Run the table's stream until the table is switched to batch (or, with
    ``until_caught_up``, until it committed everything the broker had when it started)."""

    table = config.table
    table_state = Table.read(config, settings).state
    table_state.writer.require(STREAM)
    interval = trigger_interval_s or config.stream.trigger_interval.total_seconds()
    status = StreamStatus(settings.state_location, table)
    progress = Progress(table, run_id, clock().isoformat(), until_caught_up, interval)
    with table_state.lock(STREAM_LOCK).hold(run_id) as lease:
        target: dict[int, tuple[int, int]] | None = None
        kafka_conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
        if until_caught_up:
            target = partition_offsets(kafka_conf, config.source.topic)
        checkpoint = checkpoint_location(settings, table)
        log.info("%s", checkpoint_agreement(checkpoint, table_state.commit_log, table))
        runner = EpochRunner(
            spark,
            config,
            settings,
            checkpoint=checkpoint,
            clock=clock,
            progress=progress,
            status=status,
            lease=lease,
        )
        # hours a run killed inside its seal left due: sealed before the first micro-batch, which
        # a catch-up run with nothing new to read never gets (it stops at once)
        runner.seal_if_due(f"{run_id}-start")
        until = json.dumps({p: latest for p, (_, latest) in target.items()}) if target is not None else ""
        query = _start_query(
            spark, config, settings, runner, kafka_conf=kafka_conf, until=until, interval=interval
        )
        progress.query_id = str(query.id)
        progress.state = "running"
        log.info(
            "%s: stream started (query %s, checkpoint %s, a micro-batch every %ss%s)",
            table,
            query.id,
            checkpoint,
            interval,
            ", until caught up with " + until if until else "",
        )
        try:
            reason = _watch(
                query,
                runner,
                config=config,
                settings=settings,
                status=status,
                progress=progress,
                clock=clock,
                target=target,
            )
        except Exception as exc:
            progress.state = "failed"
            progress.message = str(exc)[:2000]
            status.write(progress.to_json(clock()))
            raise
        finally:
            if query.isActive:
                query.stop()
        progress.state = "stopped"
        progress.message = reason
        status.write(progress.to_json(clock()))
        log.info("%s: stream stopped: %s", table, reason)
    return {"status": "stopped", "reason": reason, **progress.to_json(clock())}


def _start_query(
    spark: SparkSession,
    config: TableConfig,
    settings: Settings,
    runner: EpochRunner,
    *,
    kafka_conf: dict[str, Any],
    until: str,
    interval: float,
) -> Any:
    """The streaming query: tidemark's offsets source (until ``until``'s offsets, if given)
    into the runner's micro-batches, checkpointed, one trigger every ``interval`` seconds."""
    from tidemark.stream.source import SOURCE_NAME, StreamOffsetsSource

    table = config.table
    spark.dataSource.register(StreamOffsetsSource)
    tick = 0.0 if until else config.stream.idle_commit_interval.total_seconds()
    return (
        spark.readStream.format(SOURCE_NAME)
        .option("table", table)
        .option("conf_dir", str(settings.conf_dir))
        .option("state", str(settings.state_location))
        .option("secret.kafka_conf", json.dumps(kafka_conf))
        .option("secret.env", json.dumps(_state_store_env()))
        .option("tick_s", str(tick))
        .option("until", until)
        .load()
        .writeStream.queryName(f"tidemark-stream-{table}")
        .foreachBatch(runner)
        .option("checkpointLocation", checkpoint_location(settings, table))
        .trigger(processingTime=f"{interval} seconds")
        .start()
    )


def _watch(
    query: Any,
    runner: EpochRunner,
    *,
    config: TableConfig,
    settings: Settings,
    status: StreamStatus,
    progress: Progress,
    clock: Clock,
    target: dict[int, tuple[int, int]] | None,
) -> str:
    """Heartbeat until a stop reason; a failed query raises ``StreamError`` with its cause."""
    table_state = Table.read(config, settings).state
    writer = table_state.writer
    commit_log = table_state.commit_log
    last_beat = 0.0
    while True:
        try:
            if query.awaitTermination(1.0):
                raise StreamError(f"{config.table}: the stream's query ended by itself")
        except TidemarkError:
            raise
        except Exception as exc:  # StreamingQueryException: the micro-batch's own error inside
            raise StreamError(
                f"{config.table}: the stream failed in micro-batch {progress.last_epoch}: {exc}; the "
                "batch it was writing is rolled back or finished by the next start (tidemark status)"
            ) from exc
        if time.monotonic() - last_beat >= HEARTBEAT_EVERY_S:
            status.write(progress.to_json(clock()))
            last_beat = time.monotonic()
        if query.status.get("isTriggerActive"):
            continue
        if runner.stop_reason:
            return runner.stop_reason
        mode = writer.current()
        if mode.mode != STREAM:
            return f"the table was switched to {mode.describe()}"
        if target is not None and _caught_up(config, commit_log, target):
            return f"caught up with the broker's offsets at the start ({ {p: e for p, (_, e) in target.items()} })"


def _caught_up(config: TableConfig, commit_log: CommitLog, target: dict[int, tuple[int, int]]) -> bool:
    state = commit_log.state()
    if commit_log.pending_plan(state) is not None:
        return False
    return all(r.size == 0 for r in next_ranges(config, state.end_offsets, target))
