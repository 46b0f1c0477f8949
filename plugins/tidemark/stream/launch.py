"""Starting a stream from an Airflow task: a detached spark-submit of this host, the table's
own application or its group's (``tidemark.stream.group``)."""

from __future__ import annotations

import logging
import subprocess
from typing import TYPE_CHECKING, Any

from tidemark.catalog import load_table
from tidemark.jobs import SparkJob, spark_environment
from tidemark.stream.group import group_stream_lock

if TYPE_CHECKING:
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
