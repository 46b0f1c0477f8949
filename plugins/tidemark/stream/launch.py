"""Starting a stream from an Airflow task: a detached spark-submit of this host, the table's
own application or its group's (``tidemark.stream.group``); what the stream DAG's tasks call
(ensure it runs, its dry run)."""

from __future__ import annotations

import logging
import subprocess
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from tidemark.catalog import load_table
from tidemark.ingest.kafka import client_properties
from tidemark.ingest.planner import preview_batch
from tidemark.jobs import SparkJob, spark_environment
from tidemark.state.mode import STREAM
from tidemark.stream.group import group_stream_lock
from tidemark.stream.status import STREAM_LOCK, stream_health
from tidemark.table import Table

if TYPE_CHECKING:
    from tidemark.config import TableConfig
    from tidemark.settings import Settings

log = logging.getLogger(__name__)


def launch_stream(settings: Settings, table: str, run_id: str) -> dict[str, Any]:
    """Start the table's stream as a detached spark-submit on this host (the Airflow task that
    starts it returns at once; the sensor watches its status record). A table of a group is
    hosted by its group's application (``tidemark.stream.group``): started here unless it
    runs already (it then picks the table up within its poll). Returns what was launched."""

    config = load_table(table, settings)
    if config.group is None:
        job = SparkJob("stream", table, ["--run-id", run_id])
        return launch_detached(settings, job, f"stream-{table}.log")

    holder = group_stream_lock(settings, config.group).holder()
    if holder is not None and not (holder["expired"] or holder["process_gone"]):
        return {
            "launched": False,
            "why": f"group {config.group}'s stream application runs ({holder['holder']}): it starts "
            f"{table}'s query within its poll",
        }
    job = SparkJob.of_group(config.group, "stream", ["--run-id", run_id])
    return launch_detached(settings, job, f"stream-group-{config.group}.log")


def ensure_stream(settings: Settings, table: str, run_id: str) -> dict[str, Any]:
    """The stream DAG's ``ensure_stream``: start the table's stream when the table is in
    stream mode and no live stream holds its lock (a second start would wait on the lock and
    exit). Returns what was launched, or why nothing was."""
    state = Table.state_of(settings.state_location, table)
    if state.writer.current().mode != STREAM:
        return {"launched": False, "why": "the table is in batch mode"}
    holder = state.lock(STREAM_LOCK).holder()
    if holder is not None and not (holder["expired"] or holder["process_gone"]):
        return {"launched": False, "why": f"running: {holder['holder']}"}
    return launch_stream(settings, table, run_id)


def dry_run_report(config: TableConfig, settings: Settings, now: datetime) -> dict[str, Any]:
    """The stream DAG's dry run: who writes the table, how the stream is doing, and what the
    next batch would read (the planner's preview; nothing is persisted)."""
    health = stream_health(config.table, settings, stale_after=timedelta(minutes=2), now=now)
    conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
    preview = preview_batch(config, Table.read(config, settings).state.commit_log, conf)
    return {k: health[k] for k in ("mode", "state", "heartbeat_age_s", "unannounced")} | {"next": preview}


def launch_detached(settings: Settings, job: Any, log_name: str) -> dict[str, Any]:
    """``job`` as a detached spark-submit of this host, its output appended to ``log_name``."""

    settings.log_dir.mkdir(parents=True, exist_ok=True)
    log_file = settings.log_dir / log_name
    command = job.command(settings)
    with log_file.open("ab") as out:
        process = subprocess.Popen(
            command,
            env=spark_environment(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    log.info("%s launched (pid %s, log %s): %s", job.name, process.pid, log_file, " ".join(command))
    return {"launched": True, "pid": process.pid, "log": str(log_file)}
