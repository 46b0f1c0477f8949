"""DAGs built from table configs. DAG files only call these factories: no top-level work
beyond reading the table YAMLs (no DB, no connections, no Spark at parse time).

Tasks are thin: the SparkSubmitOperator runs ``spark_jobs/dump.py`` with the templated run id
and data interval, so every retry or cleared task re-does exactly the same batch.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tidemark.config import TableConfig, load_tables
from tidemark.settings import Settings

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
# The run's processing time: data_interval_end for scheduled runs, run_after for manual ones
# (a run triggered through the REST API without a logical date has no data interval at all:
# the context then lacks data_interval_end, so it is read from the dag run).
PROCESSING_TIME = "{{ (dag_run.data_interval_end or dag_run.run_after).isoformat() }}"


DAG_KINDS = ("ingest", "seal", "rebuild")


def dag_id_of(kind: str, table: str) -> str:
    """``tidemark_<kind>_<table>``: the id of a table's ingest, seal or rebuild DAG."""
    return f"tidemark_{kind}_{table}"


def table_of_dag(dag_id: str) -> str | None:
    """The table a tidemark DAG id belongs to, else None."""
    for kind in DAG_KINDS:
        prefix = dag_id_of(kind, "")
        if dag_id.startswith(prefix):
            return dag_id.removeprefix(prefix)
    return None


HOUR_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}b?$"
DRY_RUN = "{{ params.dry_run }}"


def default_args(config: TableConfig) -> dict[str, Any]:
    from functools import partial

    from tidemark.alerts import record_failure

    return {
        "owner": config.owner,
        "retries": config.retries,
        "retry_delay": config.retry_delay,
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
        "on_failure_callback": partial(record_failure, config.table),
    }


def _dry_run_param(what: str) -> Any:
    from airflow.sdk import Param

    return Param(
        False,
        type="boolean",
        title="Dry run",
        description=f"Only report {what} in the task log; read nothing, change nothing.",
    )


def _hour_param(title: str, description: str) -> Any:
    from airflow.sdk import Param

    return Param(
        None,
        type=["null", "string"],
        pattern=HOUR_PATTERN,
        title=title,
        description=description,
    )


def _spark_job(
    config: TableConfig,
    settings: Settings,
    job: str,
    doc: str,
    extra_args: list[str] | None = None,
    **operator_kwargs: Any,
) -> Any:
    """A SparkSubmitOperator running ``spark_jobs/<job>.py`` for this table and run id."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    return SparkSubmitOperator(
        task_id=job,
        doc_md=doc,
        application=str(settings.project_root / "spark_jobs" / f"{job}.py"),
        conn_id="spark_default",
        name=f"tidemark-{job}-{config.table}",
        application_args=["--table", config.table, "--run-id", "{{ run_id }}", *(extra_args or [])],
        execution_timeout=timedelta(hours=1),
        **operator_kwargs,
    )


def _table_dag(
    config: TableConfig,
    kind: str,
    *,
    description: str,
    schedule: Any,
    doc_md: str,
    params: dict[str, Any],
    max_active_runs: int = 1,
) -> Any:
    """``tidemark_<kind>_<table>``: the settings every tidemark DAG shares (no catchup: hours
    are rebuilt by backfill, batches never need one per missed interval)."""
    from airflow.sdk import DAG

    return DAG(
        dag_id=dag_id_of(kind, config.table),
        description=description,
        schedule=schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=max_active_runs,
        default_args=default_args(config),
        tags=["tidemark", kind, *config.tags],
        doc_md=doc_md,
        params=params,
    )


def _announce_task(table: str, asset: Any) -> Any:
    """The task emitting one Asset event per hour sealed, amended, released or rebuilt since
    the last announcement (shared by every DAG that changes published hours)."""
    from airflow.sdk import task

    @task(task_id="announce", inlets=[asset], outlets=[asset])
    def announce(**context: Any) -> list[str]:
        """Asset events for the hours published since the last announcement; skipped when there
        is none (a successful task with an outlet would emit a keyless event)."""
        from airflow.sdk.exceptions import AirflowSkipException

        from tidemark.announce import announce_sealed
        from tidemark.config import load_table

        current = Settings.from_env()
        announced = announce_sealed(
            load_table(table, current),
            current,
            outlet_events=context["outlet_events"],
            inlet_events=context["inlet_events"],
            run_id=context["run_id"],
        )
        if not announced:
            raise AirflowSkipException(f"{table}: no newly published hour to announce")
        return announced

    return announce()


def ingest_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_ingest_<table>``: dump one micro-batch, seal complete hours, announce them."""
    from airflow.sdk import task

    from tidemark.airflow_env import HIVE_METASTORE_POOL
    from tidemark.announce import table_asset

    asset = table_asset(config, settings)
    table = config.table

    doc = f"""
### Ingest `{config.table}` from topic `{config.source.topic}`
{config.description}

Each run dumps one micro-batch, keyed by the run id: the offsets it reads are planned once and
persisted, so **retrying or clearing the task is always safe** (a committed run is a no-op).
Rows land under the table's hourly partitions; malformed records go to `{config.dirty_table}`
with a reason code.

`seal` registers every hour whose end + commit delay the global watermark has passed (in the
`{HIVE_METASTORE_POOL}` pool); late rows go to `{config.late_table}` or amend the hour
(`late_policy: {config.late_policy}`). `announce` emits an event of asset `{asset.name}` per
sealed hour, with the hour (e.g. `2026-11-22T10`) as partition key.

`check_deadlines` fails when an hour is not sealed by its end + commit delay + seal grace
(`{config.watermark.seal_grace}`), naming the MQ partition that holds it. Trigger with
**dry run** to see the next batch's offsets without reading anything.

Inspect: `tidemark status --table {config.table}` and `--partition YYYY-MM-DDTHH` for one hour.
"""
    with _table_dag(
        config,
        "ingest",
        description=f"Exactly-once micro-batch dump of {config.source.topic} into {config.table}",
        schedule=config.schedule,
        doc_md=doc,
        params={"dry_run": _dry_run_param("the next batch's offsets and the hours a seal would register")},
    ) as dag:
        dump = _spark_job(
            config,
            settings,
            "dump",
            "spark-submit spark_jobs/dump.py for this run id (idempotent).",
            ["--processing-time", PROCESSING_TIME, "--dry-run", DRY_RUN],
        )
        seal = _spark_job(
            config,
            settings,
            "seal",
            "spark-submit spark_jobs/seal.py: compact, reconcile, register and mark complete hours.",
            ["--dry-run", DRY_RUN],
            pool=HIVE_METASTORE_POOL,
        )

        @task(task_id="metrics", trigger_rule="all_done")
        def metrics() -> dict[str, float]:
            """Gauges of the table through Airflow's metrics backend (tidemark/metrics.py); runs
            even when seal failed, so a quarantined hour or a stalled ready time shows up."""
            from tidemark.config import load_table
            from tidemark.metrics import emit_metrics

            current = Settings.from_env()
            return emit_metrics(load_table(table, current), current)

        # No retries: judged at the run's fixed data interval end, a retry gives the same answer.
        @task(task_id="check_deadlines", trigger_rule="all_done", retries=0)
        def check_deadlines(**context: Any) -> dict[str, str]:
            """Fail (an alert in the UI and the failure callback) when hours are past their seal
            deadline; the reference time is the run's data interval end, not the clock."""
            from tidemark.alerts import overdue_hours
            from tidemark.config import load_table
            from tidemark.errors import SealDeadlineMissedError

            current = Settings.from_env()
            as_of = context.get("data_interval_end") or context["dag_run"].run_after
            overdue = overdue_hours(load_table(table, current), current, as_of)
            if overdue:
                raise SealDeadlineMissedError(table, overdue)
            return overdue

        seal >> [_announce_task(table, asset), metrics(), check_deadlines()]
        dump >> seal
    return dag


def seal_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_seal_<table>``: on demand, seal now and release quarantined hours."""
    from airflow.sdk import Param

    from tidemark.airflow_env import HIVE_METASTORE_POOL
    from tidemark.announce import table_asset

    table = config.table
    with _table_dag(
        config,
        "seal",
        description=f"Seal complete hours of {table} now; release quarantined hours",
        schedule=None,
        doc_md=f"""
### Seal `{table}` on demand
The ingest DAG seals after every batch; trigger this one to seal without dumping (for example
once an idle MQ partition stops holding the ready time back) or to **release quarantined
hours**: list them in *release* after checking their data (`tidemark status --table {table}
--partition HOUR` prints the failed expectations). Released hours are registered and announced.
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
            "dry_run": _dry_run_param("the hours a seal would register and the quarantined hours"),
        },
    ) as dag:
        seal = _spark_job(
            config,
            settings,
            "seal",
            "spark-submit spark_jobs/seal.py: release the listed hours, then seal complete hours.",
            ["--release", "{{ params.release | join(',') }}", "--dry-run", DRY_RUN],
            pool=HIVE_METASTORE_POOL,
        )
        seal >> _announce_task(table, table_asset(config, settings))
    return dag


def rebuild_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_rebuild_<table>``: the run for data interval [H, H+1h) rebuilds hour H from
    the broker; backfill over it rebuilds a range of hours."""
    from airflow.sdk import task
    from airflow.timetables.interval import CronDataIntervalTimetable

    from tidemark.airflow_env import HIVE_METASTORE_POOL
    from tidemark.announce import table_asset

    table = config.table
    with _table_dag(
        config,
        "rebuild",
        description=f"Rebuild sealed hours of {table} from the broker (backfill target)",
        # A cron string would give a CronTriggerTimetable, whose runs have an empty data
        # interval; each run here must own the hour [H, H+1h).
        schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
        max_active_runs=2,
        doc_md=f"""
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
""",
        params={
            "first_hour": _hour_param(
                "First hour",
                "Hour key (YYYY-MM-DDTHH) to rebuild from; empty: the run's data interval.",
            ),
            "last_hour": _hour_param(
                "Last hour", "Hour key to rebuild through (inclusive); empty: the first hour only."
            ),
            "dry_run": _dry_run_param("the batches and offset ranges each hour would be rebuilt from"),
        },
    ) as dag:

        @task(task_id="plan")
        def plan(**context: Any) -> str:
            """The sealed hours this run rebuilds (comma-separated, for the Spark job)."""
            from tidemark.config import load_table
            from tidemark.rebuild import planned_hours

            current = Settings.from_env()
            params = context["params"]
            return planned_hours(
                load_table(table, current),
                current,
                interval=(context.get("data_interval_start"), context.get("data_interval_end")),
                first_hour=params.get("first_hour"),
                last_hour=params.get("last_hour"),
                dry_run=bool(params.get("dry_run")),
            )

        rebuild = _spark_job(
            config,
            settings,
            "rebuild",
            "spark-submit spark_jobs/rebuild.py for the hours the plan task chose.",
            ["--hours", "{{ ti.xcom_pull(task_ids='plan') }}"],
            pool=HIVE_METASTORE_POOL,
        )
        plan() >> rebuild >> _announce_task(table, table_asset(config, settings))
    return dag


def ingest_dags(settings: Settings | None = None) -> dict[str, Any]:
    """The ingest, seal and rebuild DAGs of every table YAML, keyed by dag id."""
    settings = settings or Settings.from_env()
    dags = [
        build(config, settings)
        for config in load_tables(settings)
        for build in (ingest_dag, seal_dag, rebuild_dag)
    ]
    return {dag.dag_id: dag for dag in dags}
