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
# The run's processing time: data_interval_end for scheduled runs, run_after for manual ones.
PROCESSING_TIME = "{{ (data_interval_end or dag_run.run_after).isoformat() }}"


DAG_ID_PREFIX = "tidemark_ingest_"


def default_args(config: TableConfig) -> dict[str, Any]:
    return {
        "owner": config.owner,
        "retries": config.retries,
        "retry_delay": config.retry_delay,
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
    }


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


def ingest_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_ingest_<table>``: dump one micro-batch, seal complete hours, announce them."""
    from airflow.sdk import DAG, task

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

Inspect: `tidemark status --table {config.table}` and `--partition YYYY-MM-DDTHH` for one hour.
"""
    with DAG(
        dag_id=f"{DAG_ID_PREFIX}{config.table}",
        description=f"Exactly-once micro-batch dump of {config.source.topic} into {config.table}",
        schedule=config.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=default_args(config),
        tags=["tidemark", "ingest", *config.tags],
        doc_md=doc,
    ) as dag:
        dump = _spark_job(
            config,
            settings,
            "dump",
            "spark-submit spark_jobs/dump.py for this run id (idempotent).",
            ["--processing-time", PROCESSING_TIME],
        )
        seal = _spark_job(
            config,
            settings,
            "seal",
            "spark-submit spark_jobs/seal.py: compact, reconcile, register and mark complete hours.",
            pool=HIVE_METASTORE_POOL,
        )

        @task(task_id="announce", inlets=[asset], outlets=[asset])
        def announce(**context: Any) -> list[str]:
            """Asset events for the hours sealed or amended since the last announcement; skipped
            when there is none (a successful task with an outlet would emit a keyless event)."""
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
                raise AirflowSkipException(f"{table}: no newly sealed or amended hour to announce")
            return announced

        @task(task_id="metrics", trigger_rule="all_done")
        def metrics() -> dict[str, float]:
            """Gauges of the table through Airflow's metrics backend (tidemark/metrics.py); runs
            even when seal failed, so a quarantined hour or a stalled ready time shows up."""
            from tidemark.config import load_table
            from tidemark.metrics import emit_metrics

            current = Settings.from_env()
            return emit_metrics(load_table(table, current), current)

        dump >> seal >> [announce(), metrics()]
    return dag


def ingest_dags(settings: Settings | None = None) -> dict[str, Any]:
    """One ingest DAG per table YAML, keyed by dag id."""
    settings = settings or Settings.from_env()
    dags = [ingest_dag(config, settings) for config in load_tables(settings)]
    return {dag.dag_id: dag for dag in dags}
