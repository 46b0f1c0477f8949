"""`tidemark status`: what the commit log and the broker say about a table (no JVM needed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tidemark.config import TableConfig
from tidemark.fresh import describe_fresh, fresh_status
from tidemark.observe.broker_side import broker_side, describe
from tidemark.settings import Settings
from tidemark.snapshot.snapshots import SnapshotLog
from tidemark.state.journal import EntryKind
from tidemark.state.maintenance_log import describe_steps, last_steps
from tidemark.stream.status import stream_health
from tidemark.table import Table
from tidemark.time.hours import parse_key


def table_status(config: TableConfig, settings: Settings, *, recent: int = 5) -> dict[str, Any]:
    """Batches, committed offsets, lag per MQ partition and dirty counts."""
    table = Table.read(config, settings)
    table_state = table.state
    log = table_state.commit_log
    state = log.state()
    pending = log.pending_plan(state)
    first_recent = max(0, state.last_committed - recent + 1)
    batches = [
        {
            "batch_id": c.batch_id,
            "run_id": c.committed_by_run,
            "read": c.read,
            "rows": c.rows,
            "dirty": c.dirty,
            "tombstones": c.tombstones,
            "late": c.late,
            "spanned": c.spanned,
            "without_message": c.without_message,
            "reconciliation": c.reconciliation(),
            "offsets": {r.mq_partition: [r.start, r.end] for r in c.ranges},
        }
        for c in log.iter_commits(first_recent)
    ]
    side = broker_side(config, settings, state.end_offsets)
    partitions: dict[int, dict[str, Any]] = {
        p: {"committed_end": end, "latest": None, "lag": None} for p, end in state.end_offsets.items()
    }
    partitions.update(side["partitions"])
    journal = table_state.journal.state()
    ready = state.ready
    return {
        "table": config.table,
        "topic": config.source.topic,
        "retired": config.source.retired,
        "group": config.group,
        "family": config.family,
        "ready_time": ready.time if ready else None,
        "ready_held_by": ready.holding if ready else None,
        "idle_partitions": list(ready.idle) if ready else [],
        "sealed_through": journal.sealed_through,
        "fresh": fresh_status(table, state.last_committed),
        "hours_sealed": sum(1 for e in journal.hours.values() if e.published),
        "hours_quarantined": sorted(h for h, e in journal.hours.items() if e.quarantined),
        "hours_rebuilt": sorted(h for h, e in journal.hours.items() if e.kind is EntryKind.REBUILD),
        "oldest_hour_kept": journal.oldest_hour,
        "hours_dropped_by_retention": journal.dropped,
        "retention": str(config.retention.hours) if config.retention.hours else None,
        "maintenance": last_steps(table_state.journal.root),
        "late": state.late,
        "watermarks": {w.mq_partition: w.watermark for w in ready.mq_partitions} if ready else {},
        "batches_committed": state.batches,
        "last_committed_batch": state.last_committed,
        "pending_batch": pending.describe() if pending else None,
        "lock": table_state.lock().holder(),
        "stream": stream_summary(config, settings),
        "decisions": [r.describe() for r in list(table_state.audit.records())[-recent:]],
        "rows": state.rows,
        "dirty": state.dirty,
        "tombstones": state.tombstones,
        "lost_to_retention": state.lost_to_retention,
        "without_message": state.without_message,
        "snapshots": snapshots(config, settings),
        "partitions": dict(sorted(partitions.items())),
        "recent_batches": batches,
        "broker_error": side["error"],
        "broker": side["summary"],
    }


def stream_summary(config: TableConfig, settings: Settings) -> dict[str, Any]:
    """Who writes the table, and how its stream is doing (``stream/runner.stream_health``)."""

    stale = max(timedelta(minutes=2), 6 * config.stream.trigger_interval)
    health = stream_health(config.table, settings, stale_after=stale, now=datetime.now(UTC))
    status = health["status"]
    return {
        "writer": health["writer"],
        "mode": health["mode"],
        "state": health["state"],
        "alive": health["alive"],
        "heartbeat_age_s": health["heartbeat_age_s"],
        "lock": health["lock"],
        **{
            k: status.get(k)
            for k in (
                "query_id",
                "host",
                "pid",
                "heartbeat_at",
                "last_epoch",
                "last_batch_id",
                "last_commit_at",
                "batches",
            )
        },
        "records": status.get("records"),
        "sealed": status.get("sealed", [])[-5:],
        "quarantined": status.get("quarantined", []),
        "message": status.get("message", ""),
    }


def render_stream(stream: dict[str, Any]) -> list[str]:
    lines = [f"  writer: {stream['writer']}"]
    if stream["state"] == "never_started":
        return lines
    running = stream["state"] == "running" and stream["heartbeat_age_s"] is not None
    beat = (
        f"heartbeat {stream['heartbeat_age_s']}s ago"
        if running
        else f"last heartbeat at {stream['heartbeat_at']}"
    )
    silent = "" if stream["alive"] or stream["state"] != "running" else " (SILENT: no heartbeat; restart it)"
    lines.append(
        f"  stream: {stream['state']}{silent} on {stream['host']} pid {stream['pid']} (query {stream['query_id']}), "
        f"{beat}; micro-batch {stream['last_epoch']} -> batch {stream['last_batch_id']}, last commit "
        f"{stream['last_commit_at']}; since its start {stream['batches']} batches, {stream['records']} records; "
        f"sealed {', '.join(stream['sealed']) or 'nothing yet'}"
    )
    if stream["message"]:
        lines.append(f"    {stream['message']}")
    return lines


def render_snapshot(snap: dict[str, Any]) -> str:
    """One snapshot of ``snapshots`` in a line (status and the health page)."""
    base = f", from {snap['base']}" if snap["base"] else ""
    kind = "Iceberg sequence number" if snap.get("format") == "iceberg" else "Delta version"
    version = f"; {kind} {snap['table_version']}" if snap.get("table_version") is not None else ""
    return (
        f"snapshot {snap['label']} v{snap['version']} ({snap['kind']}{base}): {snap['rows']} rows "
        f"as of {snap['through']}{version}"
    )


def snapshots(config: TableConfig, settings: Settings) -> list[dict[str, Any]]:
    """The current version of each snapshot of a CDC table (bootstrap or merge), by label."""

    if config.cdc is None:
        return []
    live = SnapshotLog(settings.state_location, config.table).live()
    return [
        {
            "label": r.label,
            "kind": r.kind,
            "version": r.version,
            "rows": r.rows,
            "through": r.through,
            "base": r.base or None,
            "run_id": r.run_id,
            "table_version": r.table_version if r.table_version >= 0 else None,
            "format": config.cdc.snapshot_format,
        }
        for _, r in sorted(live.items())
    ]


def render(status: dict[str, Any]) -> str:
    lines = [
        f"table {status['table']} (topic {status['topic']}{', retired' if status.get('retired') else ''}"
        + "".join(f"; {k} {status[k]}" for k in ("group", "family") if status.get(k))
        + ")",
        f"  batches committed: {status['batches_committed']} (last {status['last_committed_batch']}); "
        f"rows {status['rows']}, dirty {status['dirty']}, tombstones {status['tombstones']}, late {status['late']}"
        + (f", offsets without a message {status['without_message']}" if status["without_message"] else "")
        + (
            f", offsets lost to retention {status['lost_to_retention']}"
            if status["lost_to_retention"]
            else ""
        ),
        f"  global ready time: {status['ready_time']} (held by MQ partition {status['ready_held_by']}, "
        f"idle {status['idle_partitions'] or 'none'}); sealed through {status['sealed_through']} "
        f"({status['hours_sealed']} hours; quarantined: {', '.join(status['hours_quarantined']) or 'none'})",
    ]
    lines.append(f"  {describe_fresh(status.get('fresh'))}")
    for line in describe_steps(status.get("maintenance", {})):
        lines.append(f"  last {line}")
    if status.get("retention"):
        lines.append(
            f"  retention: hours kept {status['retention']}; oldest hour kept {status['oldest_hour_kept']}, "
            f"{status['hours_dropped_by_retention']} hours dropped by retention"
        )
    lines += render_stream(status["stream"])
    if status["pending_batch"]:
        lines.append(
            f"  pending (planned, not committed; the next run completes it): {status['pending_batch']}"
        )
        lines.append(
            f"    if it fails the same way on every run: tidemark resolve --table {status['table']} "
            '--action replan|skip|accept --reason "..."'
        )
    if status["lock"]:
        lock = status["lock"]
        expired = " (expired: the next job breaks it)" if lock["expired"] else ""
        lines.append(
            f"  batch lock held by {lock['holder']} since {lock['since']}, lease until {lock['expires_at']}{expired}"
        )
    for decision in status["decisions"]:
        lines.append(f"  decision {decision}")
    lines += [f"  {render_snapshot(snap)}" for snap in status["snapshots"]]
    if status["broker_error"]:
        lines.append(f"  broker: {status['broker_error']}")
    lines += describe({"summary": status["broker"], "partitions": status["partitions"]}, status["table"])
    lines.append("  MQ partition  committed end  latest  lag  watermark")
    for p, info in status["partitions"].items():
        wm = status["watermarks"].get(p)
        lines.append(
            f"  {p:>12}  {info['committed_end']!s:>13}  {info['latest']!s:>6}  {info['lag']!s:>3}  {wm}"
        )
    lines.append("  recent batches (read == rows + dirty + tombstones + late):")
    for b in status["recent_batches"]:
        lines.append(f"    #{b['batch_id']} run {b['run_id']}: {b['reconciliation']}")
    return "\n".join(lines)


def explain_hour(config: TableConfig, settings: Settings, key: str) -> dict[str, Any]:
    """Is hour ``key`` sealed? If not: which MQ partition holds it and by how much."""
    hour = parse_key(key, config.event_time.time_zone)
    table_state = Table.read(config, settings).state
    state = table_state.commit_log.state()
    journal = table_state.journal.state()
    entry = journal.hours.get(hour.key)
    needed = hour.end + config.watermark.commit_delay
    out: dict[str, Any] = {
        "table": config.table,
        "hour": hour.key,
        "partition": hour.key,  # the key's first name, kept for readers of this JSON
        "hour_start": hour.start.isoformat(),
        "hour_end": hour.end.isoformat(),
        "ready_time_needed": needed.isoformat(),
        "sealed": entry is not None and entry.published,
        "state": entry.kind if entry else "open",  # open | seal | amend | quarantine | release
        "rows_committed": state.rows_per_hour.get(hour.path, 0),
        "late": state.late_per_hour.get(hour.path, 0),
    }
    if entry is not None:
        out.update(
            version=entry.version,
            sealed_at=entry.sealed_at,
            rows=entry.rows,
            files=len(entry.files),
            sealed_by_ready_time=entry.ready_time,
            run_id=entry.run_id,
            quality=entry.quality,
        )
        return out
    ready = state.ready
    out["ready_time"] = ready.time if ready else None
    out["idle_partitions"] = list(ready.idle) if ready else []
    out["waiting_for_data"] = list(ready.waiting_for_data) if ready else []
    if journal.dropped_by_retention(hour.start):
        out["state"] = "dropped"
        out["reason"] = f"dropped by retention (retention.hours = {config.retention.hours})"
    elif ready and ready.instant and ready.instant >= needed:
        out["reason"] = "complete: the next seal run registers it"
    elif journal.sealed_through and hour.end <= datetime.fromisoformat(journal.sealed_through):
        out["reason"] = "before the first sealed hour: records for it are late"
    elif ready is None or ready.holding is None:
        out["reason"] = "no batch committed yet" if ready is None else "no watermark yet"
    else:
        holder = next(w for w in ready.mq_partitions if w.mq_partition == ready.holding)
        wm = datetime.fromisoformat(holder.watermark) if holder.watermark else None
        out["held_by"] = {
            "mq_partition": holder.mq_partition,
            "partition": holder.mq_partition,  # the key's first name, kept for readers of this JSON
            "watermark": holder.watermark,
            "max_event_time": holder.max_event_time,
            "last_moved_at": holder.last_moved_at,
            "must_advance_by_seconds": int((needed - wm).total_seconds()) if wm else None,
            "idle_after": (
                datetime.fromisoformat(holder.last_moved_at) + config.watermark.idle_timeout
            ).isoformat(),
        }
        out["reason"] = (
            f"MQ partition {holder.mq_partition} holds it: watermark {holder.watermark}, needs {needed.isoformat()}"
            if wm
            else f"MQ partition {holder.mq_partition} has no valid event yet (idle after {out['held_by']['idle_after']})"
        )
    return out


def render_hour(info: dict[str, Any]) -> str:
    head = f"{info['table']} hour {info['hour']} [{info['hour_start']} .. {info['hour_end']})"
    if info["state"] == "quarantine":
        failures = "; ".join(info["quality"].get("failures", [])) or "?"
        return (
            f"{head}: QUARANTINED by the quality gate in run {info['run_id']} ({info['rows']} rows, not registered): "
            f"{failures}\n  after checking the data: tidemark release --table {info['table']} "
            f"--hour {info['hour']}"
        )
    if info["sealed"]:
        return (
            f"{head}: SEALED v{info['version']} at {info['sealed_at']} by run {info['run_id']}; rows {info['rows']} "
            f"in {info['files']} files, late {info['late']}; sealed when ready time was {info['sealed_by_ready_time']}"
        )
    lines = [
        f"{head}: NOT SEALED; {info['reason']}",
        f"  needs global ready time >= {info['ready_time_needed']} (now {info.get('ready_time')})",
        f"  rows committed so far {info['rows_committed']}; idle MQ partitions {info.get('idle_partitions') or 'none'}",
    ]
    if "held_by" in info:
        h = info["held_by"]
        lines.append(
            f"  held by MQ partition {h['partition']}: watermark {h['watermark']} must advance "
            f"{h['must_advance_by_seconds']} s; it counts as idle if no valid record arrives on it until {h['idle_after']}"
        )
    return "\n".join(lines)
