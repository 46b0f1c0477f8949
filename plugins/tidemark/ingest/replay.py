"""Replaying dirty records: the way back from ``<table>__dirty`` into the table once the schema
or the producer's problem is fixed (or once a future event time is no longer in the future).

A replay is a batch of the commit log like any other, with the same lock, plan, rollback,
reconciliation, publish, commit record and roll-forward (``dump.run_dump``); only what it
reads differs. Instead of offsets, its plan names committed batches whose dirty records are
still visible. It classifies those records again, from their raw bytes, by today's config and
clock (the replay's plan records the clock, so a retry classifies identically):

- records that are valid now become rows of their hour (late rows if the hour is sealed:
  ``late_policy`` applies, as for any batch), with the replay's batch id as their lineage;
- the others stay dirty, with today's reason, in the replay's own ``batch_id=<replay>``
  partition of ``<table>__dirty``;
- after the commit record, the replayed batches' dirty directories move to the hidden
  ``_replayed`` directory, so every record is in exactly one place (rows + dirty + late keeps
  equal to what was produced). They are kept: a rebuild of an hour a replay fed reads them.

Offsets, watermarks and the ready time are untouched; the dirty gate does not apply (these
records were already accepted as dirty). Each replay is recorded in the audit log (who, when,
why, which batches). A retry of the same run id finishes or confirms the same replay.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.config import TableConfig
from tidemark.config.columns import DIRTY_FIELDS, TOMBSTONE
from tidemark.errors import TidemarkError, TopicChangedError
from tidemark.ingest.classify import Classifier
from tidemark.ingest.counts import check_files, fold_stats, reconcile_reads
from tidemark.ingest.frames import as_classified, classified_ddl
from tidemark.ingest.publishers import publisher
from tidemark.ingest.spec import ClassifySpec, RawRecords
from tidemark.ingest.staged import Staged, stage_classified
from tidemark.ingest.staging import staged_rows
from tidemark.state.batches import Plan
from tidemark.state.layout import Layout
from tidemark.task_runtime import task_body

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from tidemark.ingest.publishers.base import BatchPublisher
    from tidemark.state.commitlog import LogState
    from tidemark.stopwatch import Stopwatch
    from tidemark.table_state import TableState

log = logging.getLogger(__name__)

ALL = "all"


class ReplayError(TidemarkError):
    """A replay that cannot be planned: nothing to replay, an unknown batch, a pending batch."""

    retryable = False


@dataclass(frozen=True)
class ReplayRequest:
    """An operator's replay: which batches (None: every batch with visible dirty records),
    who asked, why, and the wall clock of the decision (the replay's clock)."""

    batches: tuple[int, ...] | None
    by: str
    reason: str
    at: datetime

    @classmethod
    def parse_batches(cls, text: str) -> tuple[int, ...] | None:
        """``all`` or ``3,5,8`` (the CLI's and the trigger form's spelling)."""
        text = text.strip()
        if text == ALL:
            return None
        try:
            return tuple(sorted({int(b) for b in text.replace(" ", "").split(",") if b}))
        except ValueError:
            raise ReplayError(f"batches to replay: {text!r} is neither 'all' nor a list like 3,5,8") from None


def plan_replay(
    config: TableConfig, layout: Layout, table_state: TableState, run_id: str, request: ReplayRequest
) -> Plan:
    """Persist the replay's plan and its audit record (the caller holds the table lock)."""
    table = config.table
    commit_log = table_state.commit_log
    if not request.reason.strip():
        raise ReplayError(f"{table}: say why (--reason): a replay is kept in the audit log")
    state = commit_log.state()
    bound = commit_log.bound_topic(state)
    if bound is not None and bound != config.source.topic:  # its commit must not move the binding
        raise TopicChangedError(table, bound, config.source.topic, "a replay of dirty records")
    if state.last_committed >= 0:  # a replay killed after its commit record retires its input first
        last = commit_log.commit(state.last_committed)
        publisher(layout, state.last_committed).finish(last.files if last else ())
    pending = commit_log.pending_plan(state)
    if pending is not None:
        raise ReplayError(
            f"{table}: {pending.describe()} is pending; the next ingest run completes it (or tidemark "
            "resolve decides it) before anything is replayed"
        )
    visible = layout.dirty_batches()
    batches = tuple(visible) if request.batches is None else request.batches
    unknown = [b for b in batches if b not in visible]
    if unknown:
        raise ReplayError(
            f"{table}: batches {unknown} have no dirty records in {layout.dirty_dir} (already replayed, or "
            f"none); batches with dirty records: {visible or 'none'}"
        )
    if not batches:
        raise ReplayError(f"{table}: no dirty records to replay in {layout.dirty_dir}")
    batch_id = state.last_committed + 1
    record = table_state.audit.append(
        action="replay",
        reason=request.reason,
        by=request.by,
        at=request.at.isoformat(),
        batch_id=batch_id,
        offsets=f"dirty records of batches {', '.join(map(str, batches))}",
        detail={"run_id": run_id, "batches": list(batches)},
    )
    plan = Plan(
        table=table,
        batch_id=batch_id,
        run_id=run_id,
        topic=config.source.topic,
        processing_time=request.at.isoformat(),
        ranges=(),
        sealed_through=table_state.journal.state().sealed_through,
        planned_at=request.at.isoformat(),
        replay={"batches": list(batches), "audit_seq": record.seq},
        # today's schema: a replay classifies again by today's rules (a fixed schema)
        schema_version=table_state.schema_history.ensure(config, run_id).version,
    )
    commit_log.write_plan(plan)
    commit_log.bind_run(run_id, batch_id)
    log.warning("%s: planned %s (%s)", table, plan.describe(), record.describe())
    return plan


def dirty_frame(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    """The dirty records in ``files`` (paths or URIs), as written (``DIRTY_FIELDS``)."""
    from tidemark.sparkfiles import read_parquet_files

    ddl = ", ".join(f"{name} {kind}" for name, kind, _ in DIRTY_FIELDS)
    return read_parquet_files(spark, files, ddl)


def classified_again(spark: SparkSession, files: Sequence[str], spec: ClassifySpec) -> DataFrame:
    """Dirty records classified again from their raw bytes by ``spec``, as the data source
    gives a batch's records (``frames.classified_ddl``)."""

    task = functools.partial(_classify_partitions, spec_json=spec.to_json())
    return dirty_frame(spark, files).mapInArrow(task, classified_ddl(spec))


@task_body
def _classify_partitions(batches: Iterator[pa.RecordBatch], *, spec_json: str) -> Iterator[pa.RecordBatch]:
    """One task: rebuild each MQ partition's raw records (in offset order) and classify them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from tidemark.ingest.reader import BLOCK_ROWS

    spec = ClassifySpec.from_json(spec_json)
    classifier = Classifier(spec)
    for batch in batches:
        table = pa.Table.from_batches([batch])
        for mq_partition in pc.unique(table["mq_partition"]).to_pylist():
            part = table.filter(pc.equal(table["mq_partition"], mq_partition)).sort_by("mq_offset")
            for start in range(0, part.num_rows, BLOCK_ROWS):
                chunk = part.slice(start, BLOCK_ROWS)
                raw = RawRecords(
                    mq_partition,
                    chunk["mq_offset"].to_pylist(),
                    chunk["mq_timestamp"].to_pylist(),
                    chunk["raw_key"].to_pylist(),
                    chunk["raw_value"].to_pylist(),
                )
                yield from as_classified(classifier.classify(raw), spec).to_batches()


def replay_and_stage(
    spark: SparkSession,
    *,
    config: TableConfig,
    plan: Plan,
    publisher: BatchPublisher,
    state: LogState,
    stopwatch: Stopwatch,
) -> Staged:
    """Classify the replayed batches' dirty records again and stage rows, late rows and dirty
    records like a dump does; reconcile against the records found in the dirty files."""
    from pyspark.sql import functions as F

    layout = publisher.layout
    files = [f for b in plan.replayed_batches for f in layout.visible_dirty_files(b)]
    if not files:
        raise ReplayError(
            f"{config.table}: {plan.describe()}: the dirty records are gone from {layout.dirty_dir}; "
            f"close the replay with tidemark resolve --table {config.table} --action replan"
        )
    spec = ClassifySpec.of_plan(config, plan)
    with stopwatch.phase("read_stage"):
        found = (
            dirty_frame(spark, files)
            .groupBy("mq_partition")
            .agg(F.count(F.lit(1)).alias("n"), F.sum((F.col("reason") == TOMBSTONE).cast("int")).alias("t"))
            .collect()
        )
    reads = {int(r["mq_partition"]): int(r["n"]) for r in found}
    tombstones = sum(int(r["t"] or 0) for r in found)
    replaced = sum(int(r["n"]) for r in found) - tombstones
    counts, admitted = stage_classified(
        classified_again(spark, files, spec),
        spec,
        config=config,
        publisher=publisher,
        state=state,
        stopwatch=stopwatch,
    )
    with stopwatch.phase("reconcile"):
        folded = fold_stats(counts)
        stats = reconcile_reads(
            plan, reads, folded.per_mq_partition, where={p: "dirty records" for p in reads}
        )
        check_files(plan, staged_rows(publisher.store, publisher.written()), stats)
    log.info(
        "%s: replay batch %s classified %s dirty records of batches %s again: rows %s, late %s, still dirty %s %s",
        config.table,
        plan.batch_id,
        sum(reads.values()),
        list(plan.replayed_batches),
        sum(s.rows for s in stats),
        sum(s.late for s in stats),
        sum(s.dirty for s in stats),
        folded.reasons,
    )
    return Staged(
        stats,
        folded,
        admitted,
        extra={
            "replay": {**(plan.replay or {}), "dirty_replaced": replaced, "tombstones_replaced": tombstones}
        },
    )
