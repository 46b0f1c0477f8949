"""The ingest DAGs of a table, built from its config (see ``common`` for what they share)."""

from __future__ import annotations

from typing import Any

from tidemark.airflow.common import HIVE_METASTORE_POOL, dry_run_param, table_dag, text_param
from tidemark.airflow.task_groups import dump_task, publish_tasks, seal_task, table_checks
from tidemark.config import TableConfig
from tidemark.ingest.resolve import ACTIONS
from tidemark.settings import Settings

DECISION_ARGS = [
    "--resolve",
    "{{ params.resolve or '' }}",
    "--replay-dirty",
    "{{ params.replay_dirty or '' }}",
    "--resolve-reason",
    "{{ params.resolve_reason or '' }}",
    "--resolved-by",
    "{{ dag_run.triggering_user_name or 'airflow' }}",
]


def _doc(config: TableConfig, asset_name: str) -> str:
    return f"""
### Ingest `{config.table}` from topic `{config.source.topic}`
{config.description}

Each run dumps one micro-batch, keyed by the run id: the offsets it reads are planned once and
persisted, so **retrying or clearing the task is always safe** (a committed run is a no-op).
Rows land under the table's hourly partitions; malformed records go to `{config.dirty_table}`
with a reason code.

`seal` registers every hour whose end + commit delay the global watermark has passed (in the
`{HIVE_METASTORE_POOL}` pool); late rows go to `{config.late_table}` or amend the hour
(`late_policy: {config.late_policy}`). `announce` emits an event of asset `{asset_name}` per
sealed hour, with the hour (e.g. `2026-11-22T10`) as partition key.

`check_deadlines` fails when an hour is not sealed by its end + commit delay + seal grace
(`{config.watermark.seal_grace}`), naming the MQ partition that holds it. Trigger with
**dry run** to see the next batch's offsets without reading anything.

Inspect: `tidemark status --table {config.table}` and `--hour YYYY-MM-DDTHH` for one hour.
"""


def _params() -> dict[str, Any]:
    return {
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
    }


def ingest_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_ingest_<table>``: dump one micro-batch, seal complete hours, announce them."""
    from tidemark.seal.announce import table_asset

    with table_dag(
        config,
        "ingest",
        description=f"Exactly-once micro-batch dump of {config.source.topic} into {config.table}",
        schedule=config.schedule,
        doc_md=_doc(config, table_asset(config, settings).name),
        params=_params(),
    ) as dag:
        dump = dump_task(config, settings, DECISION_ARGS)
        seal = seal_task(
            config,
            settings,
            "spark-submit spark_jobs/seal.py: compact, reconcile, register and mark complete hours.",
        )
        dump >> seal >> [publish_tasks(config, settings), *table_checks(config.table)]
    return dag
