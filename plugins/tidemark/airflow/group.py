"""The DAG of a group of tables: one Spark application per job for all of them, one task per
table for what happened to it (see ``tidemark.group``)."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

from tidemark.airflow.common import HIVE_METASTORE_POOL, START_DATE, default_args, dry_run_param
from tidemark.airflow.task_groups import DUMP_ARGS, SEAL_ARGS, publish_tasks, table_checks
from tidemark.config import TableConfig
from tidemark.settings import Settings


def group_dag_id(group: str) -> str:
    return f"tidemark_group_{group}"


def _submit(group: str, job: str, settings: Settings, args: list[str]) -> dict[str, Any]:
    """The spark-submit arguments of ``spark_jobs/group.py`` running ``job`` for ``group``."""
    from tidemark.jobs import SparkJob
    from tidemark.spark import driver_class_path, driver_java_options

    submit = SparkJob.of_group(
        group, job, ["--run-id", "{{ run_id }}", "--attempt", "{{ ti.try_number }}", *args]
    )
    return {
        "application": submit.application(settings),
        "conn_id": "spark_default",
        "name": submit.name,
        "application_args": submit.arguments,
        "driver_class_path": driver_class_path(settings) or None,
        "conf": {"spark.driver.extraJavaOptions": driver_java_options(settings)},
        "execution_timeout": timedelta(hours=1),
        "group": group,
        "job": job,
        **({"pool": HIVE_METASTORE_POOL} if job == "seal" else {}),
    }


def _group_doc(group: str, first: TableConfig, tables: list[str], asset_name: str) -> str:
    return f"""
### Group `{group}`: {len(tables)} tables, one Spark application per job
Tables: {", ".join(f"`{t}`" for t in tables)}.

`dump` runs every table's micro-batch in one Spark application, `seal` seals every table's
complete hours in one. Each table keeps its own plan, commit log and lease: one table's failure
(a refused batch, a broker error on its topic, a refused schema change) is its own.
`dump_table` and `seal_table` (one mapped task per table) report each table's part; **a
retry or a clear of one of them runs that table alone**, same run id, nothing else. The
group's `seal` waits for the group's `dump` only, and the announces for the group's `seal`: one
table's retries hold no other table back (hours its own retry seals are announced by the next
run). `announce_<table>` emits the table's hours; `announce_group` emits an event of asset
`{asset_name}` for an hour only when every table of the group has published it (the barrier
for jobs that join these tables). `every_table_ok` fails the run when any table failed.

Schedule, retries and owner come from the first table, `{first.table}`. Inspect a table:
`tidemark status --table TABLE`; decide about its stuck batch: `tidemark resolve --table TABLE`.
"""


def announce_group_step(group: str, context: dict[str, Any]) -> list[str]:
    """One event of the group asset per hour every table has published (skipped when none: a
    successful task with an outlet would emit a keyless event)."""
    from airflow.sdk.exceptions import AirflowSkipException

    from tidemark.group.barrier import announce_group_run

    announced = announce_group_run(
        group,
        Settings.from_env(),
        at=context["data_interval_end"],
        outlet_events=context["outlet_events"],
        inlet_events=context["inlet_events"],
        run_id=context["run_id"],
    )
    if not announced:
        raise AirflowSkipException(f"group {group}: no hour newly complete in every table")
    return announced


def _table_parts(group: str, settings: Settings, tables: list[str]) -> tuple[Any, Any]:
    """``dump_table`` and ``seal_table``: one mapped task per table reporting its part of the
    group's job (a retry or a clear runs that table alone)."""
    from tidemark.airflow.operators import GroupTableOperator

    dump_table, seal_table = (
        GroupTableOperator.partial(
            task_id=f"{job}_table",
            trigger_rule="all_done",
            map_index_template="{{ task.table }}",
            doc_md=f"This table's part of the group's {job}; a retry or a clear runs it alone.",
            **_submit(group, job, settings, args),
        ).expand(table=tables)
        for job, args in (("dump", DUMP_ARGS), ("seal", SEAL_ARGS))
    )
    return dump_table, seal_table


def group_dag(group: str, configs: list[TableConfig], settings: Settings) -> Any:
    """``tidemark_group_<group>``: dump every table in one application, then seal every table
    in one, each table's part reported (and retried alone) by its own mapped task; the group's
    hour is announced once every table has published it."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, task

    from tidemark.airflow.operators import GroupSparkSubmitOperator
    from tidemark.group.members import group_asset
    from tidemark.observe.alerts import record_group_failure

    first, tables = configs[0], [c.table for c in configs]
    asset = group_asset(group, settings)
    with DAG(
        dag_id=group_dag_id(group),
        description=f"Dump and seal the {len(tables)} tables of group {group} in shared Spark applications",
        schedule=first.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args={**default_args(first), "on_failure_callback": partial(record_group_failure, tables)},
        tags=sorted({"tidemark", "group", *(t for c in configs for t in c.tags)}),
        doc_md=_group_doc(group, first, tables, asset.name),
        params={"dry_run": dry_run_param("each table's next batch and the hours a seal would register")},
    ) as dag:
        dump = GroupSparkSubmitOperator(
            task_id="dump",
            doc_md="One application dumps every table's batch.",
            **_submit(group, "dump", settings, DUMP_ARGS),
        )
        seal = GroupSparkSubmitOperator(
            task_id="seal",
            doc_md="One application seals every table's complete hours.",
            trigger_rule="all_done",
            **_submit(group, "seal", settings, SEAL_ARGS),
        )
        dump_table, seal_table = _table_parts(group, settings, tables)
        announces = [
            publish_tasks(c, settings, suffix=f"_{c.table}", trigger_rule="all_done") for c in configs
        ]

        @task(task_id="announce_group", inlets=[asset], outlets=[asset], trigger_rule="all_done")
        def announce_group(**context: Any) -> list[str]:
            """The group's barrier (``announce_group_step``)."""
            return announce_group_step(group, context)

        # One table's retries never hold the others back: the group's seal waits for the group's
        # dump only (not for a failing table's dump_table retries), and each announce for the
        # group's seal (a table sealed by its own seal_table retry is announced by the next run).
        dump >> [dump_table, seal]
        [dump_table, seal] >> seal_table
        seal >> announces
        seal >> announce_group()
        seal_table >> table_checks(tables)
        [dump_table, seal_table] >> EmptyOperator(task_id="every_table_ok")
    return dag
