"""Offset planning: which slice of the topic a batch reads, decided once and persisted first."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import OffsetsLostToRetentionError, OffsetsWentBackError, StartingOffsetsError
from tidemark.faults import crash_point
from tidemark.ingest.identity import bound_identity, broker_identity, check_adopted, check_binding
from tidemark.ingest.kafka import partition_offsets
from tidemark.state.batches import MqRange, Plan
from tidemark.state.commitlog import CommitLog

if TYPE_CHECKING:
    from tidemark.table_state import TableState


log = logging.getLogger(__name__)


def next_ranges(
    config: TableConfig,
    committed_ends: Mapping[int, int],
    broker_offsets: Mapping[int, tuple[int, int]],
) -> list[MqRange]:
    """Pure planning rule: start at the committed end (or ``starting_offsets``), end at the
    latest offset capped by ``max_records_per_partition``; retention gaps per ``on_data_loss``.

    ``starting_offsets`` applies to the first batch only: an MQ partition added later starts
    at its earliest offset (its first records are new data, never to be skipped). A committed
    end beyond the broker's latest offset, or a committed partition the broker no longer has,
    raises ``OffsetsWentBackError``."""
    source = config.source
    cap = source.max_records_per_partition
    first_batch = not committed_ends
    for partition, end in sorted(committed_ends.items()):
        if partition not in broker_offsets:
            raise OffsetsWentBackError(config.table, source.topic, partition, end, None)
        if end > broker_offsets[partition][1]:
            raise OffsetsWentBackError(
                config.table, source.topic, partition, end, broker_offsets[partition][1]
            )
    ranges = []
    for partition, (earliest, latest) in sorted(broker_offsets.items()):
        if partition in committed_ends:
            start = committed_ends[partition]
        elif source.starting_offsets == "earliest" or not first_batch:
            start = earliest
        elif source.starting_offsets == "latest":
            start = latest
        else:
            start = max(earliest, source.starting_offsets.get(partition, earliest))
            if start > latest:
                raise StartingOffsetsError(config.table, source.topic, partition, start, latest)
        gap_from = gap_to = None
        if start < earliest:
            if source.on_data_loss == "fail":
                raise OffsetsLostToRetentionError(config.table, source.topic, partition, start, earliest)
            log.warning(
                "%s: data loss on %s[%s]: offsets %s..%s removed by retention; continuing (recorded)",
                config.table,
                source.topic,
                partition,
                start,
                earliest - 1,
            )
            gap_from, gap_to, start = start, earliest, earliest
        end = min(latest, start + cap)
        ranges.append(MqRange(partition, start, max(start, end), gap_from, gap_to))
    return ranges


def capped_offsets(
    broker_offsets: Mapping[int, tuple[int, int]],
    until: Mapping[int, int],
    committed_ends: Mapping[int, int],
) -> dict[int, tuple[int, int]]:
    """The broker's (earliest, latest) per MQ partition with latest capped at ``until`` (never
    below the committed end: a cap the commit log has passed reads nothing, it does not go
    back). A partition ``until`` lacks is capped at its committed end, or at its earliest
    offset when never read."""
    capped = {}
    for partition, (earliest, latest) in broker_offsets.items():
        floor = committed_ends.get(partition, earliest)
        cap = until.get(partition, floor)
        capped[partition] = (earliest, min(latest, max(cap, floor)))
    return capped


def plan_batch(
    config: TableConfig,
    table_state: TableState,
    run_id: str,
    processing_time: str,
    client_conf: dict[str, Any],
    *,
    planned_at: str | None = None,
    until: Mapping[int, int] | None = None,
) -> Plan:
    """The plan for ``run_id``: its stored plan if any, else the pending uncommitted plan (a
    failed earlier run's batch must complete before anything new is planned), else a new one.

    ``until`` (the stream's micro-batch: its end offset per MQ partition) caps a new plan's
    ends; an MQ partition it lacks reads nothing in this batch."""
    commit_log = table_state.commit_log
    bound = commit_log.batch_of_run(run_id)
    if bound is not None:
        plan = commit_log.plan(bound)
        if plan is not None:
            if commit_log.commit(bound) is None:  # a retry reads it again: still the same records?
                check_adopted(config, plan, client_conf)
            log.info("%s: run %s reuses its plan: %s", config.table, run_id, plan.describe())
            return plan
    state = commit_log.state()
    pending = commit_log.pending_plan(state)
    if pending is not None:
        check_adopted(config, pending, client_conf)
        log.warning(
            "%s: batch %s planned by run %s was never committed; run %s completes it first",
            config.table,
            pending.batch_id,
            pending.run_id,
            run_id,
        )
        commit_log.bind_run(run_id, pending.batch_id)
        return pending
    identity = None
    if config.source.retired:  # the topic is gone: an empty batch moves processing time on
        offsets = {p: (end, end) for p, end in state.end_offsets.items()}
    else:
        offsets = partition_offsets(client_conf, config.source.topic)
        broker = broker_identity(client_conf, config.source.topic)
        check_binding(config, bound_identity(commit_log, state), broker, what="a new plan")
        identity = broker.topic_id
    if until is not None:
        offsets = capped_offsets(offsets, until, state.end_offsets)
    sealed_through = table_state.journal.state().sealed_through
    plan = Plan(
        table=config.table,
        batch_id=state.last_committed + 1,
        run_id=run_id,
        topic=config.source.topic,
        processing_time=processing_time,
        ranges=tuple(next_ranges(config, state.end_offsets, offsets)),
        sealed_through=sealed_through,
        planned_at=planned_at,
        schema_version=table_state.schema_history.ensure(config, run_id).version,
        topic_id=identity,
    )
    commit_log.write_plan(plan)
    crash_point("after_plan_written")
    bound_batch = commit_log.bind_run(run_id, plan.batch_id)
    if bound_batch != plan.batch_id:  # the same run planned concurrently elsewhere
        other = commit_log.plan(bound_batch)
        assert other is not None
        return other
    log.info(
        "%s: planned %s (%s records; %s)",
        config.table,
        plan.describe(),
        plan.records_planned,
        f"hours before {sealed_through} are sealed, older records are late"
        if sealed_through
        else "no hour sealed yet: no record is late",
    )
    return plan


def preview_batch(config: TableConfig, commit_log: CommitLog, client_conf: dict[str, Any]) -> dict[str, Any]:
    """What the next dump would read, without persisting anything (the trigger form's dry run)."""
    state = commit_log.state()
    pending = commit_log.pending_plan(state)
    if pending is not None:
        return {
            "table": config.table,
            "status": "dry_run",
            "message": f"the next run completes the uncommitted {pending.describe()}",
            "records": pending.records_planned,
        }
    offsets = partition_offsets(client_conf, config.source.topic)
    check_binding(  # a dry run says so too when the next run would stop on the topic
        config,
        bound_identity(commit_log, state),
        broker_identity(client_conf, config.source.topic),
        what="a dry run",
    )
    ranges = next_ranges(config, state.end_offsets, offsets)
    preview = Plan(
        config.table, state.last_committed + 1, "(dry run)", config.source.topic, "", tuple(ranges)
    )
    log.info("%s: dry run: the next batch would be %s", config.table, preview.describe())
    return {
        "table": config.table,
        "status": "dry_run",
        "message": f"the next batch would be {preview.describe()}",
        "records": preview.records_planned,
        "lag": {p: latest - state.end_offsets.get(p, earliest) for p, (earliest, latest) in offsets.items()},
    }
