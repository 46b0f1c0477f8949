"""The maintenance DAG of a table, daily: retention, compaction, an Iceberg table's expiry,
the lake check."""

from __future__ import annotations

from functools import partial
from typing import Any

from tidemark.airflow.common import (
    DRY_RUN,
    HIVE_METASTORE_POOL,
    dry_run_param,
    spark_job,
    table_context,
    table_dag,
)
from tidemark.config import TableConfig
from tidemark.hourcommit import publication_kind
from tidemark.settings import Settings


def _doc(config: TableConfig) -> str:
    """The DAG's page: what each step does, with the table's own settings."""
    table, retention, rules = config.table, config.output.version_retention, config.retention
    compacting = config.compaction
    dropping = f"""
**retention**: hours that ended more than `retention.hours` ({rules.hours or "unset: kept"}) before
the run's data interval end are dropped whole (never an hour not sealed yet, nor one a CDC snapshot
label could still be merged from): one journal entry and an audit record name them, their
partitions are unregistered, and their files are deleted once `output.version_retention`
({retention}) has passed since the drop. The dirty records of batches committed more than
`retention.dirty` ({rules.dirty or "unset: kept"}) before, and the late side table's hours older
than `retention.late` ({rules.late or "unset: kept"}), go the same way, each audited. *Dry run*
only logs what would go. Same as `tidemark retention --table {table}`.
"""
    compaction = f"""
**compact**: an hour that late amendments left in more files than its bytes need, and in more
than `compaction.max_files_per_hour` ({compacting.max_files_per_hour}) or in files smaller on average
than `compaction.min_file_fraction` ({compacting.min_file_fraction}) of `output.target_file_size`, is
written again as one new version (the same rows, swapped in at once, journaled as `compact`).
A CDC table's Delta or Iceberg snapshot is merged back the same way, by the same rules against
`cdc.snapshot_file_size` (one OPTIMIZE or `rewrite_data_files` commit, no row changed; the
labels read their own versions). Then the orphan clean-up: versions nothing points at any more (an
object store's, or `output.layout: versioned`), once `output.version_retention` has passed, as
each seal does. The step also records each hour's bytes for the health page.
"""
    expiry = f"""
Daily: snapshots committed more than `output.version_retention` ({retention}) before the run's
data interval end (and before now) are expired, never the current one; then the manifest lists,
manifests and metadata files no kept snapshot references, older than the retention. The hour
versions only expired snapshots held are deleted by the next seal (its collector). Nothing to
compact: every version of an hour is written compacted. *Dry run* only logs what would go.
Same as `tidemark maintain --table {table}`.
"""
    verify = f"""
**verify**: the table as its readers see it (the metastore's partitions, or the current Iceberg
snapshot) against its commit log: committed offsets contiguous per MQ partition, every data
file read once, each published hour's rows equal to its committed rows, no data file outside a
registered version or a committed batch beyond the retention ({retention}). The task fails,
listing every violation, when one is found. Same as `tidemark verify --table {table}`.
"""
    keep = rules.hours or rules.dirty or rules.late
    iceberg = publication_kind(config.output.table_format).expires_snapshots
    return f"""
### Maintain `{table}`
{dropping if keep else ""}{compaction}{expiry if iceberg else ""}{verify}"""


def _expire_task(table: str) -> Any:
    """An Iceberg table's snapshot expiry (``seal/maintenance.py``), in the task's process."""
    from airflow.sdk import task

    @task(task_id="expire_snapshots")
    def expire(**context: Any) -> dict[str, Any]:
        from tidemark.seal.maintenance import maintain
        from tidemark.table import Table

        config, settings = table_context(table)
        end = context["data_interval_end"]
        return maintain(
            Table.open(config, settings), end, dry_run=bool(context["params"]["dry_run"])
        ).to_json()

    return expire()


def maintain_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_maintain_<table>``: daily; the hours past ``retention.hours`` dropped
    (``tidemark/retention.py``), amended hours' small files merged back
    (``seal/recompact.py``), an Iceberg table's snapshots past the retention expired and
    the metadata only they used deleted (``seal/maintenance.py``), then every table checked as
    its readers see it against its commit log (``observe/verify.py``)."""
    from airflow.sdk import chain
    from airflow.timetables.interval import CronDataIntervalTimetable

    iceberg = publication_kind(config.output.table_format).expires_snapshots
    rules = config.retention
    keep = rules.hours or rules.dirty or rules.late
    with table_dag(
        config,
        "maintain",
        description=f"Compact {config.table}'s amended hours and check it against its commit log daily"
        + (", after dropping what is past its retention" if keep else "")
        + (", after expiring old snapshots" if iceberg else ""),
        schedule=CronDataIntervalTimetable("30 3 * * *", timezone="UTC"),
        doc_md=_doc(config),
        params={
            "dry_run": dry_run_param("the hours, compactions, snapshots and metadata files that would go")
        },
    ) as dag:
        metastore_job = partial(spark_job, config, settings, pool=HIVE_METASTORE_POOL)
        steps = []
        if keep:
            what = "the hours, dirty records and late rows past retention dropped."
            as_of = ["--as-of", "{{ data_interval_end.isoformat() }}"]
            steps.append(
                metastore_job(
                    "retention",
                    f"spark-submit spark_jobs/retention.py: {what}",
                    [*as_of, "--dry-run", DRY_RUN],
                )
            )
        what = "amended hours' small files merged back, orphans collected."
        steps.append(
            metastore_job("compact", f"spark-submit spark_jobs/compact.py: {what}", ["--dry-run", DRY_RUN])
        )
        if iceberg:
            steps.append(_expire_task(config.table))
        what = "the lake check (exits non-zero on a violation)."
        as_of = ["--as-of", "{{ data_interval_end.isoformat() }}"]
        steps.append(metastore_job("verify", f"spark-submit spark_jobs/verify.py: {what}", as_of))
        chain(*steps)
    return dag
