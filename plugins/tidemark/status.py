"""`tidemark status`: what the commit log and the broker say about a table (no JVM needed)."""

from __future__ import annotations

from typing import Any

from tidemark.commitlog import CommitLog
from tidemark.config import TableConfig
from tidemark.errors import BrokerUnavailableError
from tidemark.kafka import client_properties, partition_offsets
from tidemark.settings import Settings


def table_status(config: TableConfig, settings: Settings, *, recent: int = 5) -> dict[str, Any]:
    """Batches, committed offsets, lag per MQ partition and dirty counts."""
    log = CommitLog(settings.state_dir, config.table)
    state = log.state()
    pending = log.pending_plan(state)
    first_recent = max(0, state.last_committed - recent + 1)
    batches = [
        {
            "batch_id": c.batch_id,
            "run_id": c.committed_by_run,
            "read": sum(p.read for p in c.partitions),
            "rows": c.rows,
            "dirty": c.dirty,
            "offsets": {r.partition: [r.start, r.end] for r in c.ranges},
        }
        for c in log.iter_commits(first_recent)
    ]
    partitions: dict[int, dict[str, Any]] = {
        p: {"committed_end": end, "latest": None, "lag": None} for p, end in state.end_offsets.items()
    }
    broker_error = None
    try:
        offsets = partition_offsets(
            client_properties(settings.kafka_bootstrap, config.source.kafka_properties), config.source.topic
        )
        for p, (_, latest) in offsets.items():
            entry = partitions.setdefault(p, {"committed_end": None, "latest": None, "lag": None})
            entry["latest"] = latest
            entry["lag"] = latest - (entry["committed_end"] or 0)
    except BrokerUnavailableError as exc:
        broker_error = str(exc)
    return {
        "table": config.table,
        "topic": config.source.topic,
        "batches_committed": state.batches,
        "last_committed_batch": state.last_committed,
        "pending_batch": pending.describe() if pending else None,
        "rows": state.rows,
        "dirty": state.dirty,
        "partitions": dict(sorted(partitions.items())),
        "recent_batches": batches,
        "broker_error": broker_error,
    }


def render(status: dict[str, Any]) -> str:
    lines = [
        f"table {status['table']} (topic {status['topic']})",
        f"  batches committed: {status['batches_committed']} (last {status['last_committed_batch']}); "
        f"rows {status['rows']}, dirty {status['dirty']}",
    ]
    if status["pending_batch"]:
        lines.append(
            f"  pending (planned, not committed; the next run completes it): {status['pending_batch']}"
        )
    if status["broker_error"]:
        lines.append(f"  broker: {status['broker_error']}")
    lines.append("  MQ partition  committed end  latest  lag")
    for p, info in status["partitions"].items():
        lines.append(f"  {p:>12}  {info['committed_end']!s:>13}  {info['latest']!s:>6}  {info['lag']!s:>3}")
    lines.append("  recent batches:")
    for b in status["recent_batches"]:
        lines.append(
            f"    #{b['batch_id']} run {b['run_id']}: read {b['read']}, rows {b['rows']}, dirty {b['dirty']}"
        )
    return "\n".join(lines)
