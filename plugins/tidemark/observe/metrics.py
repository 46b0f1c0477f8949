"""Pipeline metrics through Airflow's metrics interface (StatsD or OpenTelemetry, whichever the
deployment configured under ``[metrics]``). The state store stays the source of truth; these
are for dashboards and alerts.

Emitted by each ingest DAG run's ``metrics`` task (which runs even when seal failed), all
gauges, names prefixed ``tidemark.<table>.``:

| name | value |
|---|---|
| ``batches``, ``rows``, ``dirty``, ``tombstones``, ``late`` | totals committed so far |
| ``offsets_without_message``, ``offsets_lost_to_retention`` | totals: offsets spanned that held no \
message (transaction markers, aborted records, compacted keys); offsets retention deleted before a \
batch read them (``tidemark resolve --action accept-loss``) |
| ``broker.offsets_in_open_transactions``, ``broker.mq_partitions_at_risk``, ``broker.offsets_lost`` | the broker's side (``observe/broker_side``): offsets waiting behind an open transaction (a lag of 0 is not caught up while this is above 0), MQ partitions whose earliest offset closes in on the table's next one, offsets retention deleted before they were read (not yet recorded); not sent while the broker cannot be reached |
| ``batch.read``, ``batch.rows``, ``batch.dirty``, ``batch.tombstones``, ``batch.late`` | the last committed batch |
| ``batch.spanned``, ``batch.without_message`` | the last batch's offsets: spanned == read + without a message |
| ``ready_lag_seconds`` | last batch's processing time - global ready time (how far sealing trails) |
| ``hours_quarantined`` | hours held by the quality gate, waiting for ``tidemark release`` |
| ``group_commit_failed`` | 1 when the last batch's consumer-group commit failed (lag monitoring \
only; the batch is committed) |
| ``writer_stream`` | 1 while the table is written by the stream (``tidemark switch``), else 0 |
| ``stream.running``, ``stream.heartbeat_age_seconds`` | 1 while the stream runs with a fresh \
heartbeat; seconds since its last heartbeat (alert on it in stream mode) |
| ``hour.rows``, ``hour.late``, ``hour.freshness_seconds``, ``hour.quality_failures`` | each hour \
sealed, amended or released since the previous metrics task, in order |
| ``snapshot.rows``, ``snapshot.lag_seconds``, ``snapshot.table_version`` | a CDC table's newest \
snapshot: its rows; the last batch's processing time - the state it holds (how far snapshots \
trail ingestion); its Delta version (``cdc.snapshot_format: delta``) |
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from tidemark.config import TableConfig
from tidemark.observe.broker_side import broker_side
from tidemark.observe.status import snapshots, stream_summary
from tidemark.settings import Settings
from tidemark.state.storage import read_json, replace_atomically
from tidemark.table import Table

log = logging.getLogger(__name__)

Gauge = Callable[[str, float], None]


def airflow_gauge(name: str, value: float) -> None:
    from airflow.sdk.observability.stats import gauge

    gauge(name, value)


def emit_metrics(config: TableConfig, settings: Settings, gauge: Gauge = airflow_gauge) -> dict[str, float]:
    """Emit the table's gauges; returns what was sent (name -> last value) for the task log."""
    prefix = f"tidemark.{config.table}."
    sent: dict[str, float] = {}

    def send(name: str, value: float) -> None:
        gauge(prefix + name, value)
        sent[prefix + name] = value

    commit_log = Table.read(config, settings).state.commit_log
    state = commit_log.state()
    for name, value in (
        ("batches", state.batches),
        ("rows", state.rows),
        ("dirty", state.dirty),
        ("tombstones", state.tombstones),
        ("late", state.late),
        ("offsets_without_message", state.without_message),
        ("offsets_lost_to_retention", state.lost_to_retention),
    ):
        send(name, value)
    last = commit_log.commit(state.last_committed) if state.last_committed >= 0 else None
    if last is not None:
        send("batch.read", sum(p.read for p in last.mq_partitions))
        send("batch.rows", last.rows)
        send("batch.dirty", last.dirty)
        send("batch.tombstones", last.tombstones)
        send("batch.late", last.late)
        send("batch.spanned", last.spanned)
        send("batch.without_message", last.without_message)
    side = broker_side(config, settings, state.end_offsets)
    if side["error"] is None and not config.source.retired:
        send("broker.offsets_in_open_transactions", side["summary"]["offsets_in_open_transactions"])
        send("broker.mq_partitions_at_risk", len(side["summary"]["mq_partitions_at_risk"]))
        send("broker.offsets_lost", side["summary"]["offsets_lost_on_broker"])
    group = read_json(commit_log.group_commit_file)
    if group is not None:
        send("group_commit_failed", 1.0 if group.get("failed") else 0.0)
    if state.ready is not None and state.ready.instant is not None:
        processing = datetime.fromisoformat(state.ready.processing_time)
        send("ready_lag_seconds", (processing - state.ready.instant).total_seconds())

    stream = stream_summary(config, settings)
    send("writer_stream", 1.0 if stream["mode"] == "stream" else 0.0)
    if stream["state"] != "never_started":
        send("stream.running", 1.0 if stream["state"] == "running" and stream["alive"] else 0.0)
        if stream["heartbeat_age_s"] is not None:
            send("stream.heartbeat_age_seconds", float(stream["heartbeat_age_s"]))

    newest = max(
        snapshots(config, settings), key=lambda snap: datetime.fromisoformat(snap["through"]), default=None
    )
    if newest is not None:
        send("snapshot.rows", newest["rows"])
        if last is not None:
            held = datetime.fromisoformat(last.processing_time) - datetime.fromisoformat(newest["through"])
            send("snapshot.lag_seconds", held.total_seconds())
        if newest["table_version"] is not None:
            send("snapshot.table_version", newest["table_version"])

    journal = Table.read(config, settings).state.journal
    partitions = journal.state()
    send("hours_quarantined", sum(1 for e in partitions.hours.values() if e.quarantined))
    pointer = journal.root / "metrics_emitted.json"
    since = int((read_json(pointer) or {}).get("seq", -1))
    last_seq = since
    for entry in journal.entries(since + 1):
        last_seq = entry.seq
        if not entry.published:  # quarantined, or a retention's drop
            continue
        send("hour.rows", entry.rows)
        send("hour.late", entry.late)
        freshness = datetime.fromisoformat(entry.sealed_at) - datetime.fromisoformat(entry.hour_end)
        send("hour.freshness_seconds", freshness.total_seconds())
        send("hour.quality_failures", len(entry.quality.get("failures", [])))
    if last_seq > since:
        replace_atomically(pointer, {"seq": last_seq})
    log.info("%s: metrics sent: %s", config.table, sent)
    return sent
