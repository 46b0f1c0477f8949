"""The ingest DAGs of a table, built from its config (see ``common`` for what they share)."""

from __future__ import annotations

from typing import Any

from tidemark.airflow.common import (
    DRY_RUN,
    HIVE_METASTORE_POOL,
    PROCESSING_TIME,
    announce_task,
    dag_id_of,
    dry_run_param,
    spark_job,
    table_context,
    table_dag,
    text_param,
)
from tidemark.airflow.operators import BatchWriterSparkSubmitOperator
from tidemark.config import TableConfig
from tidemark.ingest.resolve import ACTIONS
from tidemark.settings import Settings


def ingest_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_ingest_<table>``: dump one micro-batch, seal complete hours, announce them."""
    from airflow.sdk import task

    from tidemark.seal.announce import table_asset

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

Inspect: `tidemark status --table {config.table}` and `--hour YYYY-MM-DDTHH` for one hour.
"""
    with table_dag(
        config,
        "ingest",
        description=f"Exactly-once micro-batch dump of {config.source.topic} into {config.table}",
        schedule=config.schedule,
        doc_md=doc,
        params={
            "dry_run": dry_run_param("the next batch's offsets and the hours a seal would register"),
            "resolve": text_param(
                enum=list(ACTIONS),
                title="Resolve a stuck batch",
                description="Only when every run fails the same way on the pending batch (tidemark status "
                "shows it): replan closes it reading nothing; skip records its offsets as a gap; accept "
                "commits it past max_dirty_ratio; rebase restarts MQ partitions the broker truncated. "
                "Kept in the audit log with the reason and your user.",
            ),
            "replay_dirty": text_param(
                pattern=r"^(|all|\d+(,\d+)*)$",
                title="Replay dirty records",
                description="After fixing the schema or the producer: 'all' or batch ids (3,5) whose "
                "dirty records are classified again after this run's batch; the valid ones land as rows. "
                "Needs a reason; audited.",
            ),
            "resolve_reason": text_param(
                title="Reason",
                description="Why (required with a decision or a replay; audited).",
            ),
        },
    ) as dag:
        dump = spark_job(
            config,
            settings,
            "dump",
            "spark-submit spark_jobs/dump.py for this run id (idempotent); skipped while the "
            "table is written by the stream (tidemark switch).",
            [
                "--processing-time",
                PROCESSING_TIME,
                "--dry-run",
                DRY_RUN,
                "--resolve",
                "{{ params.resolve or '' }}",
                "--replay-dirty",
                "{{ params.replay_dirty or '' }}",
                "--resolve-reason",
                "{{ params.resolve_reason or '' }}",
                "--resolved-by",
                "{{ dag_run.triggering_user_name or 'airflow' }}",
            ],
            operator=BatchWriterSparkSubmitOperator,
        )
        seal = spark_job(
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
            from tidemark.observe.metrics import emit_metrics

            return emit_metrics(*table_context(table))

        # No retries: judged at the run's fixed data interval end, a retry gives the same answer.
        @task(task_id="check_deadlines", trigger_rule="all_done", retries=0)
        def check_deadlines(**context: Any) -> dict[str, str]:
            """Fail (an alert in the UI and the failure callback) when hours are past their seal
            deadline; the reference time is the run's data interval end, not the clock."""
            from tidemark.errors import SealDeadlineMissedError
            from tidemark.observe.alerts import describe_overdue, overdue_hours

            as_of = context.get("data_interval_end") or context["dag_run"].run_after
            config, settings = table_context(table)
            overdue = overdue_hours(config, settings, as_of)
            if overdue:
                raise SealDeadlineMissedError(table, overdue, describe_overdue(config, overdue))
            return overdue

        announce = announce_task(table, asset)
        seal >> [announce, metrics(), check_deadlines()]
        dump >> seal
        if config.cdc is not None:
            find_stale, remerge = _remerge_tasks(config)
            announce >> find_stale >> remerge
    return dag


def _remerge_tasks(config: TableConfig) -> tuple[Any, Any]:
    """find_stale_snapshot >> remerge: when an amend changed an hour a merged snapshot read,
    trigger the merge DAG for the newest snapshot (it re-merges the stale chain first)."""
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
    from airflow.sdk import task

    table = config.table

    # Also after a skipped announce: a remerge that failed in an earlier run is found again.
    @task(task_id="find_stale_snapshot", trigger_rule="none_failed")
    def find_stale_snapshot() -> str:
        """The newest merged snapshot if an amended hour made it (or its base) stale."""
        from airflow.sdk.exceptions import AirflowSkipException

        from tidemark.snapshot.merge_plan import stale_snapshot

        label = stale_snapshot(*table_context(table))
        if label is None:
            raise AirflowSkipException(f"{table}: every merged snapshot is current")
        return label

    remerge = TriggerDagRunOperator(
        task_id="remerge",
        trigger_dag_id=dag_id_of("merge", table),
        conf={"snapshot": "{{ ti.xcom_pull(task_ids='find_stale_snapshot') }}"},
        doc_md="Triggers the merge DAG for the stale snapshot (a late change amended one of its hours).",
    )
    return find_stale_snapshot(), remerge
