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


def default_args(config: TableConfig) -> dict[str, Any]:
    return {
        "owner": config.owner,
        "retries": 3,
        "retry_delay": timedelta(minutes=1),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
    }


def ingest_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_ingest_<table>``: one exactly-once micro-batch dump per run."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import DAG

    doc = f"""
### Ingest `{config.table}` from topic `{config.source.topic}`
{config.description}

Each run dumps one micro-batch, keyed by the run id: the offsets it reads are planned once and
persisted, so **retrying or clearing the task is always safe** (a committed run is a no-op).
Rows land under the table's hourly partitions; malformed records go to `{config.dirty_table}`
with a reason code. Inspect progress with `tidemark status --table {config.table}`.
"""
    with DAG(
        dag_id=f"tidemark_ingest_{config.table}",
        description=f"Exactly-once micro-batch dump of {config.source.topic} into {config.table}",
        schedule=config.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=default_args(config),
        tags=["tidemark", "ingest", *config.tags],
        doc_md=doc,
    ) as dag:
        SparkSubmitOperator(
            task_id="dump",
            doc_md="spark-submit spark_jobs/dump.py for this run id (idempotent).",
            application=str(settings.project_root / "spark_jobs" / "dump.py"),
            conn_id="spark_default",
            name=f"tidemark-dump-{config.table}",
            application_args=[
                "--table",
                config.table,
                "--run-id",
                "{{ run_id }}",
                "--processing-time",
                PROCESSING_TIME,
            ],
            execution_timeout=timedelta(hours=1),
        )
    return dag


def ingest_dags(settings: Settings | None = None) -> dict[str, Any]:
    """One ingest DAG per table YAML, keyed by dag id."""
    settings = settings or Settings.from_env()
    dags = [ingest_dag(config, settings) for config in load_tables(settings)]
    return {dag.dag_id: dag for dag in dags}
