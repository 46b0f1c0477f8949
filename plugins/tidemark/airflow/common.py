"""What every tidemark DAG shares: ids, default args, trigger-form params, the spark-submit
task (the task groups they share are in ``task_groups``). DAG modules only wire tasks (no top-level work: no DB, no
connections, no Spark at parse time); tasks get the table config and settings in ``execute``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tidemark.airflow.dag_ids import dag_id_of
from tidemark.config import TableConfig
from tidemark.settings import Settings

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)
# The run's processing time: data_interval_end for scheduled runs, run_after for manual ones
# (a run triggered through the REST API without a logical date has no data interval at all:
# the context then lacks data_interval_end, so it is read from the dag run).
PROCESSING_TIME = "{{ (dag_run.data_interval_end or dag_run.run_after).isoformat() }}"
# One Derby metastore client at a time (embedded default); a metastore service needs no pool.
HIVE_METASTORE_POOL = "hive_metastore"


HOUR_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}b?$"
DRY_RUN = "{{ params.dry_run }}"


def default_args(config: TableConfig) -> dict[str, Any]:
    from functools import partial

    from tidemark.observe.alerts import record_failure

    return {
        "owner": config.owner,
        "retries": config.retries,
        "retry_delay": config.retry_delay,
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
        "on_failure_callback": partial(record_failure, config.table),
    }


def dry_run_param(what: str) -> Any:
    from airflow.sdk import Param

    return Param(
        False,
        type="boolean",
        title="Dry run",
        description=f"Only report {what} in the task log; read nothing, change nothing.",
    )


def text_param(*, title: str, description: str, **schema: Any) -> Any:
    """An optional text field of a trigger form: null by default, so the Airflow UI does not
    mark it required (it disables *Trigger* while a non-null string field is empty); a
    template reads it as ``{{ params.x or '' }}``."""
    from airflow.sdk import Param

    if "enum" in schema:
        schema["enum"] = [None, *schema["enum"]]
        # the form's label of the empty choice (it would show a literal `null`)
        schema["values_display"] = {"null": "(none)", **schema.get("values_display", {})}
    return Param(None, type=["null", "string"], title=title, description=description, **schema)


def hour_param(title: str, description: str) -> Any:
    """An optional hour key; its description shows the format by example, because a refused
    value's message is Airflow's (the pattern, as JSON schema writes it)."""
    from airflow.sdk import Param

    return Param(
        None,
        type=["null", "string"],
        pattern=HOUR_PATTERN,
        title=title,
        description=f"{description} Format: YYYY-MM-DDTHH in the table's time zone, e.g. 2026-11-22T10.",
    )


def spark_job(
    config: TableConfig,
    settings: Settings,
    job: str,
    doc: str,
    extra_args: list[str] | None = None,
    *,
    operator: Any = None,
    **operator_kwargs: Any,
) -> Any:
    """A SparkSubmitOperator running ``spark_jobs/<job>.py`` for this table and run id."""
    from tidemark.airflow.operators import TidemarkSparkSubmitOperator
    from tidemark.jobs import SparkJob
    from tidemark.spark import driver_class_path, driver_java_options

    submit = SparkJob(job, config.table, ["--run-id", "{{ run_id }}", *(extra_args or [])])
    operator_kwargs.setdefault("driver_class_path", driver_class_path(settings) or None)
    operator_kwargs.setdefault("conf", {"spark.driver.extraJavaOptions": driver_java_options(settings)})
    return (operator or TidemarkSparkSubmitOperator)(
        task_id=job,
        doc_md=doc,
        application=submit.application(settings),
        conn_id="spark_default",
        name=submit.name,
        application_args=submit.arguments,
        execution_timeout=timedelta(hours=1),
        **operator_kwargs,
    )


def table_dag(
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


def table_context(table: str) -> tuple[TableConfig, Settings]:
    """The table's config and the deployment settings, read when a task runs (never at parse
    time): what every Python task of a tidemark DAG starts from."""
    from tidemark.catalog import load_table

    settings = Settings.from_env()
    return load_table(table, settings), settings
