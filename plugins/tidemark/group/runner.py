"""One job body over every table of a group, in one Spark application, each table isolated.

The tables run side by side on a small thread pool (Spark schedules the jobs of several
threads at once, each table's in a fair-scheduler pool of its own): a table that waits on its
broker, runs a big job or fails does not hold the others' commit or seal back. Each table's body is exactly the per-table job's (``run_dump``, ``run_seal``),
with its own schema check, lease, plan and commit log; an exception is that table's failure,
recorded for its own Airflow task, and never the group's. Only what breaks the shared session
itself fails the job (its tables' tasks then run each table alone).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.group.outcomes import FAILED, OK, SKIPPED, TableOutcome, record_outcome
from tidemark.ingest.dump import run_dump
from tidemark.ingest.kafka import client_properties
from tidemark.ingest.planner import preview_batch
from tidemark.masking import mask_text
from tidemark.seal.sealing import preview_seal, run_seal
from tidemark.table import Table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.config import TableConfig
    from tidemark.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_PARALLELISM = 4
TABLE_POOL = "spark.scheduler.pool"  # the local property naming a thread's fair-scheduler pool
GROUP_JOBS = ("dump", "seal")


class TableSkipped(Exception):
    """This table has nothing to do in this job (not an error): ``str`` says why."""


@dataclass(frozen=True)
class GroupRun:
    """One run of a group job: which job, for which run id and processing time."""

    group: str
    job: str  # dump | seal
    run_id: str
    processing_time: datetime
    planned_at: datetime
    dry_run: bool = False
    attempt: int = 1  # the group task's try number: a table task's later try trusts a record this fresh


def _dump(spark: SparkSession, config: TableConfig, settings: Settings, run: GroupRun) -> dict[str, Any]:
    if run.dry_run:
        conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
        return preview_batch(config, Table.read(config, settings).state.commit_log, conf)
    _skip_when_streamed(config, settings, "its stream reads it")
    return run_dump(
        spark, config, settings, run.run_id, run.processing_time, planned_at=run.planned_at
    ).to_json()


def _seal(spark: SparkSession, config: TableConfig, settings: Settings, run: GroupRun) -> dict[str, Any]:
    if run.dry_run:
        return preview_seal(config, settings)
    _skip_when_streamed(config, settings, "its stream seals it")
    return run_seal(spark, config, settings, run.run_id).to_json()


def _skip_when_streamed(config: TableConfig, settings: Settings, why: str) -> None:
    """A table written by its stream is not the group job's (its own ingest DAG skips its
    dump and seal then too): waiting on the stream's lock would only hold a thread."""

    mode = Table.read(config, settings).state.writer.current()
    if mode.mode != "batch":
        raise TableSkipped(
            f"written by the {mode.describe()}: {why} (tidemark switch --table {config.table} --to batch)"
        )


BODIES: dict[str, Callable[[SparkSession, TableConfig, Settings, GroupRun], dict[str, Any]]] = {
    "dump": _dump,
    "seal": _seal,
}


def run_table(spark: SparkSession, config: TableConfig, settings: Settings, run: GroupRun) -> TableOutcome:
    """One table's part: its schema check and its job, any failure kept as its outcome."""

    started = time.perf_counter()
    spark.sparkContext.setJobDescription(f"{config.table}: {run.job} of run {run.run_id}")
    spark.sparkContext.setLocalProperty(TABLE_POOL, config.table)  # its own fair-scheduler pool
    try:
        table = Table.open(config, settings).checked(run.run_id, dry_run=run.dry_run)
        with table.held():  # the table's part opens its state once
            result = BODIES[run.job](spark, config, settings, run)
        status, detail, error_type = OK, str(result.get("message", "")), ""
    except TableSkipped as skipped:
        result, status, detail, error_type = {}, SKIPPED, str(skipped), ""
    except Exception as exc:  # isolation: the table's own failure, never the group's
        log.exception("%s (group %s): the %s of run %s failed", config.table, run.group, run.job, run.run_id)
        result, status, detail, error_type = {}, FAILED, mask_text(str(exc))[:2000], type(exc).__name__
    outcome = TableOutcome(
        run.group,
        config.table,
        run.job,
        run.run_id,
        status,
        detail,
        error_type,
        round(time.perf_counter() - started, 3),
        result,
        run.attempt,
    )
    record_outcome(settings.state_location, outcome)  # a dry run's too: its tasks report it
    log.info(
        "%s (group %s): %s of run %s %s in %.1f s%s",
        config.table,
        run.group,
        run.job,
        run.run_id,
        status,
        outcome.seconds,
        f": {detail}" if detail else "",
    )
    return outcome


def run_group(
    spark: SparkSession,
    configs: list[TableConfig],
    settings: Settings,
    run: GroupRun,
    *,
    parallelism: int = DEFAULT_PARALLELISM,
) -> dict[str, Any]:
    """Run ``run.job`` for every table of ``configs`` in this session; the result names each
    table's outcome (the job succeeds although tables failed: their own tasks report them)."""
    log.info(
        "group %s: %s of run %s for %s tables (%s at a time): %s",
        run.group,
        run.job,
        run.run_id,
        len(configs),
        parallelism,
        ", ".join(c.table for c in configs),
    )
    with ThreadPoolExecutor(max_workers=max(1, min(parallelism, len(configs) or 1))) as pool:
        outcomes = list(pool.map(lambda c: run_table(spark, c, settings, run), configs))
    failed = [o.table for o in outcomes if o.status == FAILED]
    if failed:
        log.warning("group %s: %s of run %s failed for %s", run.group, run.job, run.run_id, ", ".join(failed))
    return {
        "group": run.group,
        "job": run.job,
        "run_id": run.run_id,
        "status": "partly_failed" if failed else "ok",
        "failed": failed,
        "tables": {o.table: {"status": o.status, "seconds": o.seconds, "detail": o.detail} for o in outcomes},
    }
