"""The seal and rebuild DAGs of a table, built from its config (see ``common`` for what they share)."""

from __future__ import annotations

from typing import Any

from tidemark.airflow.common import (
    HIVE_METASTORE_POOL,
    HOUR_PATTERN,
    dry_run_param,
    hour_param,
    spark_job,
    table_context,
    table_dag,
)
from tidemark.airflow.dag_ids import dag_id_of
from tidemark.airflow.task_groups import publish_tasks, seal_task
from tidemark.config import TableConfig
from tidemark.settings import Settings


def seal_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_seal_<table>``: on demand, seal now and release quarantined hours."""
    from airflow.sdk import Param

    table = config.table
    with table_dag(
        config,
        "seal",
        description=f"Seal complete hours of {table} now; release quarantined hours",
        schedule=None,
        doc_md=f"""
### Seal `{table}` on demand
The ingest DAG seals after every batch; trigger this one to seal without dumping (for example
once an idle MQ partition stops holding the ready time back) or to **release quarantined
hours**: list them in *release* after checking their data (`tidemark status --table {table}
--hour HOUR` prints the failed expectations). Released hours are registered and announced.
""",
        params={
            "release": Param(
                [],
                type="array",
                items={"type": "string", "pattern": HOUR_PATTERN},
                title="Release quarantined hours",
                description="Hour keys (YYYY-MM-DDTHH, e.g. 2026-11-22T10) to register although the "
                "quality gate blocked them. Each must be quarantined, or the run fails naming it.",
            ),
            "dry_run": dry_run_param("the hours a seal would register and the quarantined hours"),
        },
    ) as dag:
        seal = seal_task(
            config,
            settings,
            "spark-submit spark_jobs/seal.py: release the listed hours, then seal complete hours.",
            ["--release", "{{ params.release | join(',') }}"],
        )
        seal >> publish_tasks(config, settings)
    return dag


def _rebuild_doc(config: TableConfig) -> str:
    table = config.table
    return f"""
### Rebuild hours of `{table}`
The run for data interval [H, H+1h) rebuilds hour H deterministically: it re-reads from the
broker the offset ranges the commit log says fed H, keeps H's rows (late ones too under
`late_policy: amend`; now `{config.late_policy}`), checks the count against the commit log,
re-validates, swaps the hour's directory in one step and re-registers and re-announces it.
Rebuilding twice gives the same rows. Hours not sealed yet are skipped (the ingest DAG seals
them); offsets gone from the broker fail with `DataLossError` and leave the hour untouched.

- Backfill: `airflow backfill create --dag-id {dag_id_of("rebuild", table)} --from-date 2026-11-22T10:00
  --to-date 2026-11-22T12:00` or the UI's backfill dialog.
- Trigger with *first hour* / *last hour* to rebuild a range in one run; *dry run* only logs
  the batches and offsets each hour needs.
"""


def plan_step(table: str, context: dict[str, Any]) -> str:
    """The sealed hours a rebuild run takes (comma-separated, for the Spark job): a param
    that is wrong on every try fails once, unretried; nothing to rebuild skips."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from tidemark.errors import TidemarkError
    from tidemark.seal.rebuild_plan import planned_hours

    params = context["params"]
    try:
        selection = planned_hours(
            *table_context(table),
            interval=(context.get("data_interval_start"), context.get("data_interval_end")),
            first_hour=params.get("first_hour"),
            last_hour=params.get("last_hour"),
            dry_run=bool(params.get("dry_run")),
        )
    except TidemarkError as exc:
        if exc.retryable:
            raise
        raise AirflowFailException(f"{exc} (not retried: the params are wrong on every try)") from exc
    if selection.skip_reason:
        raise AirflowSkipException(selection.skip_reason)
    return ",".join(selection.chosen)


def rebuild_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_rebuild_<table>``: the run for data interval [H, H+1h) rebuilds hour H from
    the broker; backfill over it rebuilds a range of hours."""
    from airflow.sdk import task
    from airflow.timetables.interval import CronDataIntervalTimetable

    from tidemark.airflow.operators import HourWriterSparkSubmitOperator

    table = config.table
    with table_dag(
        config,
        "rebuild",
        description=f"Rebuild sealed hours of {table} from the broker (backfill target)",
        # A cron string would give a CronTriggerTimetable, whose runs have an empty data
        # interval; each run here must own the hour [H, H+1h).
        schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
        max_active_runs=2,
        doc_md=_rebuild_doc(config),
        params={
            "first_hour": hour_param(
                "First hour", "The hour to rebuild from; empty: the run's data interval."
            ),
            "last_hour": hour_param(
                "Last hour", "Hour key to rebuild through (inclusive); empty: the first hour only."
            ),
            "dry_run": dry_run_param("the batches and offset ranges each hour would be rebuilt from"),
        },
    ) as dag:

        @task(task_id="plan")
        def plan(**context: Any) -> str:
            """The sealed hours this run rebuilds (``plan_step``)."""
            return plan_step(table, context)

        rebuild = spark_job(
            config,
            settings,
            "rebuild",
            "spark-submit spark_jobs/rebuild.py for the hours the plan task chose.",
            ["--hours", "{{ ti.xcom_pull(task_ids='plan') }}"],
            pool=HIVE_METASTORE_POOL,
            operator=HourWriterSparkSubmitOperator,
        )
        plan() >> rebuild >> publish_tasks(config, settings)
    return dag
