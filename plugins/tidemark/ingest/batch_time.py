"""What a batch tells about event time: the per-MQ-partition watermarks and the table's global
ready time, advanced from the committed state by what the batch saw (recorded in its commit)."""

from __future__ import annotations

from datetime import datetime, timedelta

from tidemark.config import TableConfig
from tidemark.state.batches import MqPartitionStats, Plan
from tidemark.state.commitlog import LogState
from tidemark.time.watermarks import BatchObservation, MqWatermark, ReadyTime, advance, ready_time


def batch_watermarks(
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
