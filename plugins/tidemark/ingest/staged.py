"""Staging a classified frame, as the dump of a table with partition columns and every replay
do it: the per-hour bound on partition values over the whole batch, then rows, late rows and
dirty records in one pass of tasks; and what the staged files hold once reconciled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.faults import crash_point
from tidemark.ingest import cardinality
from tidemark.ingest.counts import FoldedCounts, StagedCount
from tidemark.state.batches import MqPartitionStats
from tidemark.state.commitlog import LogState
from tidemark.state.partition_values import PartitionValues, merge
from tidemark.stopwatch import Stopwatch

if TYPE_CHECKING:
    from tidemark.ingest.publish import Publisher
    from tidemark.ingest.spec import ClassifySpec


@dataclass(frozen=True)
class Staged:
    """What a batch's staged files hold, reconciled against the read receipts."""

    stats: list[MqPartitionStats]
    counts: FoldedCounts
    partition_values: dict[str, dict[str, list[str]]]
    extra: dict[str, Any] = field(default_factory=dict)  # recorded in the commit (a replay's)


def stage_classified(
    classified: Any,
    spec: ClassifySpec,
    *,
    config: TableConfig,
    publisher: Publisher,
    state: LogState,
    stopwatch: Stopwatch,
) -> tuple[list[StagedCount], PartitionValues]:
    """Bound partition values over the whole batch, then stage rows, late rows and dirty
    records of a classified frame in one pass of tasks (``staging.stage_frame``); return the
    tasks' counts and the values this batch admitted (tables with partition columns, and
    replays)."""
    from pyspark import StorageLevel

    from tidemark.ingest.staging import stage_frame

    parsed = classified.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with stopwatch.phase("read_stage"):  # the first action reads the broker
            known = state.partition_values
            candidates = cardinality.candidate_values(parsed, config, known)
            admitted = cardinality.admit(known, candidates, config.partitioning.max_values_per_column)
            bounded = cardinality.apply_bound(parsed, config, merge(known, admitted))
            counts = stage_frame(bounded, publisher.staging_targets(), spec)
            crash_point("after_staging")
        return counts, admitted
    finally:
        parsed.unpersist()
