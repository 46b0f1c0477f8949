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


DAG_KINDS = ("ingest", "seal", "rebuild", "bootstrap", "merge")


def dag_id_of(kind: str, table: str) -> str:
    """``tidemark_<kind>_<table>``: the id of one of a table's DAGs (see DAG_KINDS)."""
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


def _text_param(*, title: str, description: str) -> Any:
    from airflow.sdk import Param

    return Param("", type="string", title=title, description=description)


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
    *,
    operator: Any = None,
    **operator_kwargs: Any,
) -> Any:
    """A SparkSubmitOperator running ``spark_jobs/<job>.py`` for this table and run id."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    return (operator or SparkSubmitOperator)(
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

        announce = _announce_task(table, asset)
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

        from tidemark.config import load_table
        from tidemark.merge import stale_snapshot

        current = Settings.from_env()
        label = stale_snapshot(load_table(table, current), current)
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


SOURCE_KINDS = ["parquet", "csv", "jdbc"]


def bootstrap_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_bootstrap_<table>`` (manual): bulk-load a full snapshot of a CDC table."""
    from airflow.sdk import Param

    from tidemark.airflow_env import HIVE_METASTORE_POOL
    from tidemark.operators import SourceCredentialsSparkSubmitOperator
    from tidemark.spark import jdbc_driver_class_path

    table = config.table
    conn_id = f"tidemark_{table}_source"
    with _table_dag(
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
            "source_kind": Param(
                "jdbc", type="string", enum=SOURCE_KINDS, title="Source kind", description="What to read."
            ),
            "source": Param(
                "",
                type="string",
                minLength=1,
                title="Source",
                description="JDBC URL (jdbc:postgresql://host:5432/db) or a path of Parquet/CSV files.",
            ),
            "source_table": _text_param(title="Source table", description="jdbc: the table to read."),
            "query": _text_param(title="Query", description="jdbc: a SELECT, instead of a table."),
            "partition_column": _text_param(
                title="Partition column", description="jdbc: numeric/date column to split by."
            ),
            "lower_bound": _text_param(title="Lower bound", description="jdbc: empty = min()."),
            "upper_bound": _text_param(title="Upper bound", description="jdbc: empty = max()."),
            "num_partitions": Param(
                4,
                type="integer",
                minimum=1,
                maximum=256,
                title="Parallel reads",
                description="jdbc: ranges read in parallel (and files written).",
            ),
            "snapshot_label": Param(
                "",
                type="string",
                pattern=r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})?$",
                title="Snapshot label",
                description="Partition value in snapshot_dt; empty: the run time, e.g. 2026-11-22T1005.",
            ),
            "source_conn_id": Param(conn_id, type="string", title="Connection", description="Credentials."),
            "dry_run": _dry_run_param("the label, the source and the topic's end offsets now"),
        },
    ) as dag:
        args = [
            ("--source-kind", "source_kind"),
            ("--source", "source"),
            ("--source-table", "source_table"),
            ("--query", "query"),
            ("--partition-column", "partition_column"),
            ("--lower-bound", "lower_bound"),
            ("--upper-bound", "upper_bound"),
            ("--num-partitions", "num_partitions"),
            ("--label", "snapshot_label"),
        ]
        _spark_job(
            config,
            settings,
            "bootstrap",
            "spark-submit spark_jobs/bootstrap.py: align to the topic, read the source, publish.",
            [
                *(part for flag, name in args for part in (flag, f"{{{{ params.{name} }}}}")),
                "--as-of",
                "{{ dag_run.run_after.isoformat() }}",
                "--dry-run",
                DRY_RUN,
            ],
            operator=SourceCredentialsSparkSubmitOperator,
            source_conn_id="{{ params.source_conn_id }}",
            driver_class_path=jdbc_driver_class_path() or None,
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

    from tidemark.announce import table_asset

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
    from airflow.sdk import Param

    from tidemark.airflow_env import HIVE_METASTORE_POOL

    table = config.table
    assert config.cdc is not None
    with _table_dag(
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
            "snapshot": Param(
                "",
                type="string",
                pattern=r"^(\d{4}-\d{2}-\d{2}(T\d{2}b?)?)?$",
                title="Snapshot",
                description="The period to merge; empty: the partition key of the triggering assets.",
            ),
            "dry_run": _dry_run_param("the base snapshot and the increment hours a merge would read"),
        },
    ) as dag:
        _spark_job(
            config,
            settings,
            "merge",
            "spark-submit spark_jobs/merge.py for the snapshot period (idempotent per run id).",
            ["--snapshot", "{{ params.snapshot or dag_run.partition_key }}", "--dry-run", DRY_RUN],
            pool=HIVE_METASTORE_POOL,
        )
    return dag


def ingest_dags(settings: Settings | None = None) -> dict[str, Any]:
    """Every DAG of every table YAML, keyed by dag id: ingest, seal and rebuild; bootstrap
    and merge for CDC tables."""
    settings = settings or Settings.from_env()
    dags = []
    for config in load_tables(settings):
        builders = [ingest_dag, seal_dag, rebuild_dag]
        if config.cdc is not None:
            builders += [bootstrap_dag, merge_dag]
        dags += [build(config, settings) for build in builders]
    return {dag.dag_id: dag for dag in dags}
