"""The maintenance DAG of an Iceberg table (``output.table_format: iceberg``)."""

from __future__ import annotations

from typing import Any

from tidemark.airflow.common import dry_run_param, table_context, table_dag
from tidemark.config import TableConfig
from tidemark.settings import Settings


def maintain_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_maintain_<table>``: daily, expire snapshots past the retention and delete the
    metadata only they used (``seal/maintenance.py``)."""
    from airflow.sdk import task
    from airflow.timetables.interval import CronDataIntervalTimetable

    table = config.table
    retention = config.output.version_retention
    with table_dag(
        config,
        "maintain",
        description=f"Expire old snapshots of the Iceberg table {table} and delete their metadata",
        schedule=CronDataIntervalTimetable("30 3 * * *", timezone="UTC"),
        doc_md=f"""
### Maintain the Iceberg table `{table}`
Daily: snapshots committed more than `output.version_retention` ({retention}) before the run's
data interval end (and before now) are expired, never the current one; then the manifest lists,
manifests and metadata files no kept snapshot references, older than the retention. The hour
versions only expired snapshots held are deleted by the next seal (its collector). Nothing to
compact: every version of an hour is written compacted. *Dry run* only logs what would go.
Same as `tidemark maintain --table {table}`.
""",
        params={"dry_run": dry_run_param("the snapshots and metadata files that would go")},
    ) as dag:

        @task(task_id="expire_snapshots")
        def expire(**context: Any) -> dict[str, Any]:
            from tidemark.seal.maintenance import maintain
            from tidemark.table import Table

            config, settings = table_context(table)
            end = context["data_interval_end"]
            return maintain(
                Table.open(config, settings), end, dry_run=bool(context["params"]["dry_run"])
            ).to_json()

        expire()
    return dag
