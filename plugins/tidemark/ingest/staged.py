"""Staging a batch: reading the plan's ranges and staging what they hold (``read_and_stage``);
a classified frame staged as the dump of a table with partition columns and every replay do
it (the per-hour bound on partition values over the whole batch, then rows, late rows and
dirty records in one pass of tasks); and what the staged files hold once reconciled."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.faults import crash_point
from tidemark.hourcommit import publication_kind
from tidemark.ingest import cardinality
from tidemark.ingest.counts import (
    FoldedCounts,
    StagedCount,
    check_files,
    fold_stats,
    progress_lines,
    reconcile,
)
from tidemark.ingest.spec import ClassifySpec
from tidemark.ingest.staging import StagingTargets, stage_frame, staged_rows
from tidemark.state.batches import MqPartitionStats
from tidemark.state.commitlog import LogState
from tidemark.state.partition_values import PartitionValues, merge
from tidemark.stopwatch import Stopwatch
from tidemark.tableformat import batch_format
from tidemark.tablefs import Store

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.ingest.publishers.base import BatchPublisher
    from tidemark.state.batches import Plan


@dataclass(frozen=True)
class Staged:
    """What a batch's staged files hold, reconciled against the read receipts."""

    stats: list[MqPartitionStats]
    counts: FoldedCounts
    partition_values: dict[str, dict[str, list[str]]]
    extra: dict[str, Any] = field(default_factory=dict)  # recorded in the commit (a replay's)


def staging_targets(publisher: BatchPublisher, config: TableConfig) -> StagingTargets:
    """Where the publisher has the tasks write, the rows in the table's sealed format: a
    batch file near the target size is then adopted by the seal as it is, not rewritten."""
    int96 = publication_kind(config.output.table_format).int96_timestamps
    return replace(publisher.staging_targets(), rows_format=batch_format(config, int96=int96))


def stage_classified(
    classified: Any,
    spec: ClassifySpec,
    *,
    config: TableConfig,
    publisher: BatchPublisher,
    state: LogState,
    stopwatch: Stopwatch,
) -> tuple[list[StagedCount], PartitionValues]:
    """Bound partition values over the whole batch, then stage rows, late rows and dirty
    records of a classified frame in one pass of tasks (``staging.stage_frame``); return the
    tasks' counts and the values this batch admitted (tables with partition columns, and
    replays)."""
    from pyspark import StorageLevel

    parsed = classified.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with stopwatch.phase("read_stage"):  # the first action reads the broker
            known = state.partition_values
            candidates = cardinality.candidate_values(parsed, config, known)
            admitted = cardinality.admit(known, candidates, config.partitioning.max_values_per_column)
            bounded = cardinality.apply_bound(parsed, config, merge(known, admitted))
            counts = stage_frame(bounded, staging_targets(publisher, config), spec)
            crash_point("after_staging")
        return counts, admitted
    finally:
        parsed.unpersist()


def read_and_stage(
    spark: SparkSession,
    *,
    config: TableConfig,
    plan: Plan,
    publisher: BatchPublisher,
    kafka_conf: dict[str, Any],
    state: LogState,
    stopwatch: Stopwatch,
    meanwhile: Callable[[], object] | None = None,
) -> Staged:
    """Read the plan's ranges, classify, stage rows and dirty records; return reconciled stats
    (``meanwhile``: the driver's own work while tasks forked from it read, ``stage_ranges``).

    Tables without data-derived partition columns stage in the read tasks themselves
    (``staging.py``); the others go through a Spark frame, because bounding partition values
    needs the whole batch (``cardinality.py``)."""
    from tidemark.ingest.reader import read_receipts
    from tidemark.ingest.source import read_ranges, stage_ranges

    targets = staging_targets(publisher, config)
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
                meanwhile=meanwhile,
            )
            crash_point("after_staging")
    with stopwatch.phase("reconcile"):
        folded = fold_stats(counts)
        receipts_read = read_receipts(targets.store, targets.receipts)
        stats = reconcile(plan, receipts_read, folded.per_mq_partition)
        check_files(plan, staged_rows(publisher.store, publisher.written()), stats)
    for line in progress_lines(plan, stats, receipts_read, folded):
        log.info("%s: %s", config.table, line)
    return Staged(stats, folded, admitted)
