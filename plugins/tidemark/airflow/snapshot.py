"""The bootstrap and merge (CDC snapshot) DAGs of a table, built from its config (see ``common`` for what they share)."""

from __future__ import annotations

from typing import Any

from tidemark.airflow.common import (
    DRY_RUN,
    HIVE_METASTORE_POOL,
    dry_run_param,
    spark_job,
    table_dag,
    text_param,
)
from tidemark.config import TableConfig
from tidemark.settings import Settings
from tidemark.snapshot.sources import SOURCE_ARGUMENTS


def source_params() -> dict[str, Any]:
    """The trigger form's source fields, from the one declaration the job parses too."""
    from airflow.sdk import Param

    params = {}
    for arg in SOURCE_ARGUMENTS:
        schema: dict[str, Any] = (
            {"type": "integer", "minimum": 1, "maximum": 256} if arg.integer else {"type": "string"}
        )
        if arg.choices:
            schema["enum"] = list(arg.choices)
        elif arg.required:
            schema["minLength"] = 1
        elif not arg.integer and not arg.default:  # optional: null, or the UI marks it required
            params[arg.param] = text_param(title=arg.title, description=arg.help)
            continue
        params[arg.param] = Param(arg.default, title=arg.title, description=arg.help, **schema)
    return params


def bootstrap_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_bootstrap_<table>`` (manual): bulk-load a full snapshot of a CDC table."""
    from airflow.sdk import Param

    from tidemark.airflow.operators import SourceCredentialsSparkSubmitOperator

    table = config.table
    conn_id = f"tidemark_{table}_source"
    with table_dag(
        config,
        "bootstrap",
        description=f"Bulk-load a full snapshot of {table} into {config.snapshot_table}",
        schedule=None,
        doc_md=f"""
### Bootstrap `{config.snapshot_table}`
Reads the whole source once (JDBC with parallel range reads, or Parquet/CSV files) into a
snapshot partition. **Before** reading, it records the end offsets of topic
`{config.source.topic}`: the increments merged on top start exactly there, so a change made
during the read is in both (harmless: merges keep the highest version) and none is lost.
Re-running a run id is a no-op; a new bootstrap becomes the merges' base only once complete.

Credentials: the Airflow connection named in *Connection* (default `{conn_id}`, login and
password), passed to the job through its environment; never type them into this form.
""",
        params={
            **source_params(),
            "snapshot_label": text_param(
                pattern=r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})?$",
                title="Snapshot label",
                description="Partition value in snapshot_dt; empty: the run time, e.g. 2026-11-22T1005.",
            ),
            "source_conn_id": Param(conn_id, type="string", title="Connection", description="Credentials."),
            "dry_run": dry_run_param("the label, the source and the topic's end offsets now"),
        },
    ) as dag:
        spark_job(
            config,
            settings,
            "bootstrap",
            "spark-submit spark_jobs/bootstrap.py: align to the topic, read the source, publish.",
            [
                *(
                    part
                    for arg in SOURCE_ARGUMENTS
                    for part in (arg.flag, f"{{{{ params.{arg.param} or '' }}}}")
                ),
                "--label",
                "{{ params.snapshot_label or '' }}",
                "--as-of",
                "{{ dag_run.run_after.isoformat() }}",
                "--dry-run",
                DRY_RUN,
            ],
            operator=SourceCredentialsSparkSubmitOperator,
            source_conn_id="{{ params.source_conn_id }}",
            pool=HIVE_METASTORE_POOL,
        )
    return dag


def snapshot_schedule(config: TableConfig, settings: Settings) -> Any:
    """The merge DAG's timetable: the table's hourly Asset events, rolled up to the snapshot
    period (all 24 hours of a day, or each hour) with Airflow's partitioned-asset scheduling."""
    from airflow.sdk import (
        DayWindow,
        IdentityMapper,
        PartitionedAssetTimetable,
        RollupMapper,
        StartOfDayMapper,
    )

    from tidemark.seal.announce import table_asset

    assert config.cdc is not None
    asset = table_asset(config, settings)
    if config.cdc.snapshot_every == "hour":
        return PartitionedAssetTimetable(assets=asset, default_partition_mapper=IdentityMapper())
    day = StartOfDayMapper(
        timezone=config.event_time.time_zone, input_format="%Y-%m-%dT%H", output_format="%Y-%m-%d"
    )
    return PartitionedAssetTimetable(
        assets=asset, default_partition_mapper=RollupMapper(upstream_mapper=day, window=DayWindow())
    )


def merge_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_merge_<table>``: snapshot T once all of T's increment hours are sealed."""

    table = config.table
    assert config.cdc is not None
    with table_dag(
        config,
        "merge",
        description=f"Merge sealed increments of {table} into {config.snapshot_table}",
        schedule=snapshot_schedule(config, settings),
        doc_md=f"""
### Merge `{config.snapshot_table}`
Scheduled by the sealed hours of `{table}` (Asset events with the hour as partition key),
rolled up per {config.cdc.snapshot_every}: the run for snapshot T starts once every hour of T
is sealed, never on a clock. Snapshot T = the previous snapshot + the sealed increment hours
since, latest (version, offset) per key, deletes applied. It refuses hours that are not sealed
(naming them) and first re-merges snapshots made stale by late changes (`late_policy: amend`).

Trigger manually with *Snapshot* (a day `2026-11-22` or an hour `2026-11-22T13`) to merge or
re-merge one; *dry run* shows the base and the hours it would read.
""",
        params={
            "snapshot": text_param(
                pattern=r"^(\d{4}-\d{2}-\d{2}(T\d{2}b?)?)?$",
                title="Snapshot",
                description="The period to merge; empty: the partition key of the triggering assets.",
            ),
            "dry_run": dry_run_param("the base snapshot and the increment hours a merge would read"),
        },
    ) as dag:
        spark_job(
            config,
            settings,
            "merge",
            "spark-submit spark_jobs/merge.py for the snapshot period (idempotent per run id).",
            ["--snapshot", "{{ params.snapshot or dag_run.partition_key }}", "--dry-run", DRY_RUN],
            pool=HIVE_METASTORE_POOL,
        )
    return dag
