"""Which hours a seal takes (pure, from the commit log's and the journal's state): every hour
from the sealed frontier up to the limit the global ready time and processing time allow.
Read by the seal, the stream, the group barrier and the deadline alerts."""

from __future__ import annotations

from datetime import datetime

from tidemark.config import TableConfig
from tidemark.state.commitlog import LogState
from tidemark.state.journal import JournalState
from tidemark.time.hours import Hour, hour_of, hours_from, parse_path
from tidemark.time.instants import parse_instant


def seal_limit(config: TableConfig, state: LogState) -> datetime | None:
    """Hours ending at or before this instant are complete: the global ready time has passed
    their end + ``commit_delay``, and so has processing time, whatever event times say (one
    record stamped up to ``max_future_skew`` ahead on an idle topic must not seal its hour
    before the hour is over)."""
    if state.ready is None or state.ready.instant is None:
        return None
    processing = parse_instant(state.ready.processing_time)
    limit = state.ready.instant if processing is None else min(state.ready.instant, processing)
    return limit - config.watermark.commit_delay


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


def unfinished_hours(config: TableConfig, state: LogState, journal: JournalState) -> list[str]:
    """The hours of a table that still have work: committed rows in an hour that is not
    published, or late rows not folded into their hour yet (empty: nothing left to do; a
    retired family member is then done, and leaves its group's barrier)."""
    zone = config.event_time.time_zone
    left = []
    with_rows = {p for p, n in state.rows_per_hour.items() if n}
    for path in sorted(with_rows | {p for p, n in state.late_per_hour.items() if n}):
        key = parse_path(path, zone).key
        entry = journal.hours.get(key)
        if entry is None or not entry.published:
            left.append(key)
            continue
        batches = state.batches_of_hour(path) or [state.last_committed]
        if state.late_per_hour.get(path) and entry.folded_through_batch < max(batches):
            left.append(key)
    return left
