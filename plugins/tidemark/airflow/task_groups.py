"""The task groups every table DAG shares, one function each: the dump, the seal, what
publishes a seal's hours (announce; for a CDC table, the remerge of a snapshot an amend made
stale) and the table's checks after it (metrics, deadlines). The ingest, group, stream, seal
and rebuild DAGs wire these; none builds its own variant."""

from __future__ import annotations

from typing import Any

from tidemark.airflow.common import (
    DRY_RUN,
    HIVE_METASTORE_POOL,
    PROCESSING_TIME,
    spark_job,
    table_context,
)
from tidemark.airflow.dag_ids import dag_id_of
from tidemark.config import TableConfig
from tidemark.settings import Settings

# The arguments of every dump and seal job (a table's or a group's), after the run id.
DUMP_ARGS = ["--processing-time", PROCESSING_TIME, "--dry-run", DRY_RUN]
SEAL_ARGS = ["--dry-run", DRY_RUN]


def dump_task(config: TableConfig, settings: Settings, extra_args: list[str]) -> Any:
    """``dump``: one micro-batch of the table, keyed by the run id (skipped in stream mode)."""
    from tidemark.airflow.operators import BatchWriterSparkSubmitOperator

    return spark_job(
        config,
        settings,
        "dump",
        "spark-submit spark_jobs/dump.py for this run id (idempotent); skipped while the "
        "table is written by the stream (tidemark switch).",
        [*DUMP_ARGS, *extra_args],
        operator=BatchWriterSparkSubmitOperator,
        table=config.table,
    )


def seal_task(config: TableConfig, settings: Settings, doc: str, extra_args: list[str] | None = None) -> Any:
    """``seal``: the table's seal job, in the metastore pool."""
    from tidemark.airflow.operators import HourWriterSparkSubmitOperator

    return spark_job(
        config,
        settings,
        "seal",
        doc,
        [*(extra_args or []), *SEAL_ARGS],
        pool=HIVE_METASTORE_POOL,
        operator=HourWriterSparkSubmitOperator,
    )


def publish_tasks(
    config: TableConfig, settings: Settings, *, suffix: str = "", **announce_kwargs: Any
) -> Any:
    """``announce`` (``announce<suffix>``), followed for a CDC table by find_stale_snapshot >>
    remerge: every DAG that changes published hours announces them and re-merges a snapshot
    they made stale. Returns the announce task (what a DAG wires after its job)."""
    from tidemark.seal.announce import table_asset

    announce = announce_task(
        config.table, table_asset(config, settings), task_id=f"announce{suffix}", **announce_kwargs
    )
    if config.cdc is not None:
        find_stale, remerge = remerge_tasks(config, suffix)
        announce >> find_stale >> remerge
    return announce


def table_checks(tables: str | list[str]) -> list[Any]:
    """``metrics`` and ``check_deadlines`` of one table, or mapped over a group's tables."""
    if isinstance(tables, str):
        return [metrics_task()(tables), deadlines_task()(tables)]
    mapped = {"map_index_template": "{{ table }}"}
    return [metrics_task(**mapped).expand(table=tables), deadlines_task(**mapped).expand(table=tables)]


def announce_task(table: str, asset: Any, task_id: str = "announce", **task_kwargs: Any) -> Any:
    """The task emitting one Asset event per hour sealed, amended, released or rebuilt since
    the last announcement (shared by every DAG that changes published hours)."""
    from airflow.sdk import task

    @task(task_id=task_id, inlets=[asset], outlets=[asset], **task_kwargs)
    def announce(**context: Any) -> list[str]:
        """Asset events for the hours published since the last announcement; skipped when there
        is none (a successful task with an outlet would emit a keyless event)."""
        from airflow.sdk.exceptions import AirflowSkipException

        from tidemark.seal.announce import announce_sealed

        config, current = table_context(table)
        announced = announce_sealed(
            config,
            current,
            outlet_events=context["outlet_events"],
            inlet_events=context["inlet_events"],
            run_id=context["run_id"],
        )
        if not announced:
            raise AirflowSkipException(f"{table}: no newly published hour to announce")
        return announced

    return announce()


def metrics_task(**task_kwargs: Any) -> Any:
    """The ``metrics`` task of a table (its argument; mapped over a group's tables)."""
    from airflow.sdk import task

    @task(task_id="metrics", trigger_rule="all_done", **task_kwargs)
    def metrics(table: str, **context: Any) -> dict[str, float]:
        """Gauges of the table through Airflow's metrics backend (tidemark/metrics.py); runs
        even when seal failed, so a quarantined hour or a stalled ready time shows up."""
        from tidemark.observe.metrics import emit_metrics

        context["table"] = table  # the map index's name in a group's DAG

        return emit_metrics(*table_context(table))

    return metrics


def deadlines_task(**task_kwargs: Any) -> Any:
    """The ``check_deadlines`` task of a table (its argument; mapped over a group's tables)."""
    from airflow.sdk import task

    # No retries: judged at the run's fixed data interval end, a retry gives the same answer.
    @task(task_id="check_deadlines", trigger_rule="all_done", retries=0, **task_kwargs)
    def check_deadlines(table: str, **context: Any) -> dict[str, str]:
        """Fail (an alert in the UI and the failure callback) when hours are past their seal
        deadline; the reference time is the run's data interval end, not the clock."""
        from tidemark.errors import SealDeadlineMissedError
        from tidemark.observe.alerts import describe_overdue, overdue_hours

        context["table"] = table  # the map index's name in a group's DAG
        as_of = context.get("data_interval_end") or context["dag_run"].run_after
        config, settings = table_context(table)
        overdue = overdue_hours(config, settings, as_of)
        if overdue:
            raise SealDeadlineMissedError(table, overdue, describe_overdue(config, overdue))
        return overdue

    return check_deadlines


def remerge_tasks(config: TableConfig, suffix: str = "") -> tuple[Any, Any]:
    """find_stale_snapshot >> remerge: when an amend changed an hour a merged snapshot read,
    trigger the merge DAG for the newest snapshot (it re-merges the stale chain first).
    ``suffix`` tells a group's tables apart (``_<table>``)."""
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
    from airflow.sdk import task

    table = config.table

    # Also after a skipped announce: a remerge that failed in an earlier run is found again.
    @task(task_id=f"find_stale_snapshot{suffix}", trigger_rule="none_failed")
    def find_stale_snapshot() -> str:
        """The newest merged snapshot if an amended hour made it (or its base) stale."""
        from airflow.sdk.exceptions import AirflowSkipException

        from tidemark.snapshot.merge_plan import stale_snapshot

        label = stale_snapshot(*table_context(table))
        if label is None:
            raise AirflowSkipException(f"{table}: every merged snapshot is current")
        return label

    remerge = TriggerDagRunOperator(
        task_id=f"remerge{suffix}",
        trigger_dag_id=dag_id_of("merge", table),
        conf={"snapshot": f"{{{{ ti.xcom_pull(task_ids='find_stale_snapshot{suffix}') }}}}"},
        doc_md="Triggers the merge DAG for the stale snapshot (a late change amended one of its hours).",
    )
    return find_stale_snapshot(), remerge
