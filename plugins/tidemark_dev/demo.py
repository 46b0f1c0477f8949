"""`make demo`: the ingest DAG through Airflow, end to end on embedded defaults.

In a home of its own (``$TIDEMARK_HOME/demo``, recreated each time) it starts the local broker
unless one runs, creates a fresh topic with 4 MQ partitions for the ``events`` table and runs
``tidemark_ingest_events`` three times with ``dag.test()`` (dump -> seal -> announce, the real
SparkSubmitOperator), producing a generated clickstream between runs:

1. hours 08:00-10:30 on MQ partitions 0-2 with disorder inside the tolerance; partition 3 only
   sends 08:00-08:20 and then goes quiet: it holds every hour back;
2. 10:30-11:00: partition 3 has been quiet for ``idle_timeout``, stops holding: 08 and 09 seal;
3. 11:00-11:30 plus records for 08 and 09, which are sealed by then: late (``events__late``).

Each run's processing time is its logical date (a fixed timeline, so the demo is reproducible).
At the end it queries the metastore with Spark SQL and prints the registered hours, rows per
hour, late and dirty counts and ``produced == rows + dirty + late``.

Then the orders path (full + periodic increment): order changes of 06:00-08:00 go to the
``orders`` topic and into the source (PostgreSQL through JDBC when the server is installed,
Parquet files otherwise); ``tidemark_bootstrap_orders`` reads the source at 08:00, aligned to
the topic's offsets; the rest of the day's changes (inserts, updates, deletes, a few sent twice
or out of order) arrive; ``tidemark_ingest_orders`` seals every hour of the day and
``tidemark_merge_orders`` builds snapshot ``2026-11-22``, which the demo compares row by row
with the source database's own final state.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from tidemark.settings import Settings
from tidemark.time.hours import hour_path
from tidemark_dev.airflow_env import HIVE_METASTORE_POOL, airflow_environment, metastore_pool
from tidemark_dev.generator import Message, create_topic, events, produce, records
from tidemark_dev.services import BrokerService

log = logging.getLogger(__name__)

DAY = datetime(2026, 11, 22, tzinfo=UTC)
TABLE = "events"
ORDERS = "orders"


def at(hh: int, mm: int = 0) -> datetime:
    return DAY + timedelta(hours=hh, minutes=mm)


def _on(partition: int, messages: Any) -> list[Message]:
    return [replace(m, partition=partition) for m in messages]


def _phases(scale: int) -> list[tuple[datetime, list[Message]]]:
    """(processing time, messages produced before the run) of the three demo runs."""
    a = list(
        events(scale, start=at(8), span=timedelta(hours=2, minutes=30), partitions=3, dirty_fraction=0.01)
    )
    a += _on(3, events(scale // 15, start=at(8), span=timedelta(minutes=20), partitions=1, seed=3))
    b = list(
        events(
            scale // 5,
            start=at(10, 30),
            span=timedelta(minutes=30),
            partitions=3,
            seed=4,
            dirty_fraction=0.01,
        )
    )
    c = list(
        events(
            scale // 5, start=at(11), span=timedelta(minutes=30), partitions=3, seed=5, dirty_fraction=0.01
        )
    )
    c += records([(i % 3, at(8 + i % 2, (7 * i) % 60)) for i in range(30)], prefix="late")
    return [(at(10, 30), a), (at(11), b), (at(11, 30), c)]


def _demo_settings(base: Settings) -> Settings:
    home = base.home / "demo"
    shutil.rmtree(home, ignore_errors=True)
    conf_dir = home / "conf"
    conf_dir.mkdir(parents=True)
    suffix = uuid.uuid4().hex[:8]
    for table in (TABLE, ORDERS):
        data = yaml.safe_load((base.conf_dir / f"{table}.yaml").read_text())
        data["source"]["topic"] = f"tidemark-demo-{table}-{suffix}"  # never mixes with old data
        (conf_dir / f"{table}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return replace(base, home=home, conf_dir=conf_dir, warehouse=str(home / "warehouse"))


def _dag(dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).get_dag(dag_id)
    if dag is None:
        raise RuntimeError(f"DAG {dag_id} was not built from the demo's conf dir")
    return dag


def _prepare_airflow(settings: Settings) -> Any:
    os.environ.update(airflow_environment(settings))
    os.environ["TIDEMARK_WAREHOUSE"] = settings.warehouse
    from airflow.models.pool import Pool
    from airflow.utils.db import initdb

    initdb()
    Pool.create_or_update_pool(HIVE_METASTORE_POOL, *metastore_pool(settings), False)
    return _dag(f"tidemark_ingest_{TABLE}")


def run_demo(settings: Settings | None = None, *, scale: int = 6_000) -> int:
    base = settings or Settings.from_env()
    demo = _demo_settings(base)
    broker = BrokerService(base)
    started_here = not broker.status().running
    broker.start()
    try:
        from tidemark.config import load_table
        from tidemark.observe.status import explain_hour, render, render_hour, table_status

        config = load_table(TABLE, demo)
        create_topic(demo.kafka_bootstrap, config.source.topic, 4)
        dag = _prepare_airflow(demo)
        produced = 0
        for i, (processing, messages) in enumerate(_phases(scale), start=1):
            produced += len(produce(demo.kafka_bootstrap, config.source.topic, messages))
            print(
                f"\n== run {i}: produced {len(messages)} messages; DAG run at {processing.isoformat()}",
                flush=True,
            )
            run = dag.test(logical_date=processing, run_after=processing)
            states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
            print(f"   tasks: {states}", flush=True)
            if i == 1:
                print(render_hour(explain_hour(config, demo, "2026-11-22T08")), flush=True)
            if states.get("check_deadlines") == "failed":
                print(
                    "   check_deadlines is the alert for hours still unsealed at their end + commit delay + "
                    "seal_grace: here one MQ partition went quiet and holds them until it counts as idle",
                    flush=True,
                )
        print()
        print(render(table_status(config, demo)))
        orders, final_state = _run_orders(demo, base, scale)
        # In-process Spark last: its JVM keeps the embedded Derby metastore booted until exit.
        events_ok = _report(config, demo, produced) == 0
        return 0 if _check_snapshot(orders, demo, final_state) == 0 and events_ok else 1
    finally:
        if started_here:
            broker.stop()


def _report(config: Any, settings: Settings, produced: int) -> int:
    from tidemark.spark import build_session
    from tidemark.state.commitlog import CommitLog

    state = CommitLog(settings.state_location, config.table).state()
    spark = build_session("tidemark-demo-report", settings, hive=True)
    try:
        print("\nhours registered in the metastore (Spark SQL):")
        per_hour = spark.sql(
            f"SELECT dt, hr, count(*) AS n FROM `{config.table}` GROUP BY dt, hr ORDER BY dt, hr"
        ).collect()
        for r in spark.sql(f"SHOW PARTITIONS `{config.table}`").collect():
            n = next((x["n"] for x in per_hour if hour_path(x["dt"], x["hr"]) == r[0]), 0)
            print(f"  {r[0]}: {n} rows")
        sealed_rows = sum(int(x["n"]) for x in per_hour)
        late = spark.sql(
            f"SELECT dt, hr, count(*) AS n FROM `{config.late_table}` GROUP BY dt, hr ORDER BY dt, hr"
        ).collect()
        print(
            "late rows (events__late): " + ", ".join(f"{hour_path(x['dt'], x['hr'])}: {x['n']}" for x in late)
        )
    finally:
        spark.stop()
    open_rows = state.rows - sealed_rows
    total = state.rows + state.dirty + state.late
    ok = total == produced
    print(
        f"reconciliation: produced {produced} == rows {state.rows} (sealed {sealed_rows} + open {open_rows}) "
        f"+ dirty {state.dirty} + late {state.late}: {'OK' if ok else 'MISMATCH'}"
    )
    return 0 if ok else 1


# -- the orders path: bootstrap + hourly increments + daily merge ---------------------------------
def _postgres_available() -> bool:
    import glob

    from tidemark.spark import JDBC_DRIVER_JARS

    return bool(glob.glob("/usr/lib/postgresql/*/bin/postgres")) and os.path.isfile(JDBC_DRIVER_JARS[0])


def _source_form(
    demo: Settings, base: Settings, state: dict[int, dict[str, Any]]
) -> tuple[dict[str, Any], Any]:
    """Load the source (PostgreSQL when installed, else Parquet files); the trigger form for it
    and the service to stop afterwards (None if none was started here)."""
    import json

    from tidemark_dev.postgres import POSTGRES_PASSWORD, POSTGRES_USER, PostgresService, postgres_url

    if _postgres_available():
        from tidemark_dev.pgsource import ORDERS_COLUMNS, ORDERS_DDL, replace_table

        service = PostgresService(base)
        started = not service.status().running
        service.start()
        replace_table(demo, "orders_source", ORDERS_DDL, ORDERS_COLUMNS, state.values())
        conn = {"conn_type": "postgres", "login": POSTGRES_USER, "password": POSTGRES_PASSWORD}
        os.environ[f"AIRFLOW_CONN_TIDEMARK_{ORDERS.upper()}_SOURCE"] = json.dumps(conn)
        form = {
            "source_kind": "jdbc",
            "source": postgres_url(demo),
            "source_table": "orders_source",
            "partition_column": "order_id",
            "num_partitions": 2,
        }
        print(f"   source: PostgreSQL table orders_source on {postgres_url(demo)} ({len(state)} rows)")
        return form, service if started else None
    import pyarrow as pa
    import pyarrow.parquet as pq

    export = demo.home / "orders_export"
    export.mkdir(parents=True, exist_ok=True)
    rows = list(state.values())
    columns = {
        name: [r[name] for r in rows] for name in ("order_id", "version", "customer_id", "status", "amount")
    }
    table = pa.table(
        {
            **columns,
            "updated_at": pa.array(
                [datetime.fromisoformat(r["updated_at"]) for r in rows], pa.timestamp("us", "UTC")
            ),
        }
    )
    pq.write_table(table, export / "orders.parquet")
    print(f"   source: Parquet export {export} ({len(state)} rows; PostgreSQL is not installed)")
    return {"source_kind": "parquet", "source": str(export)}, None


def _closing_changes(state: dict[int, dict[str, Any]], partitions: int) -> list[dict[str, Any]]:
    """One update per MQ partition just after midnight: every partition's watermark passes the
    day's end, so all 24 hours seal (they belong to the next day's snapshot)."""
    changes = []
    for p in range(partitions):
        order_id = next(k for k in sorted(state) if k % partitions == p)
        row = state[order_id]
        changes.append(
            {**row, "op": "u", "version": int(row["version"]) + 1, "updated_at": at(24, 20).isoformat()}
        )
    return changes


def _run_orders(demo: Settings, base: Settings, scale: int) -> tuple[Any, dict[int, dict[str, Any]]]:
    """The orders DAG runs; returns the config and the source's final state to check against."""
    from tidemark.config import load_table
    from tidemark_dev.generator import change_messages, order_changes, state_after

    config = load_table(ORDERS, demo)
    topic = config.source.topic
    create_topic(demo.kafka_bootstrap, topic, 4)
    before = order_changes(scale // 3, start=at(6), span=timedelta(hours=2), seed=31)
    source_state = state_after(before)
    produce(demo.kafka_bootstrap, topic, change_messages(before, partitions=4))
    print(f"\n== orders: {len(before)} changes of 06:00-08:00 are in topic {topic} and in the source")
    form, service = _source_form(demo, base, source_state)
    try:
        run = _dag(f"tidemark_bootstrap_{ORDERS}").test(logical_date=at(8), run_after=at(8), run_conf=form)
        print(f"   bootstrap: {_states(run)}")
        after = order_changes(
            scale, start=at(8), span=timedelta(hours=15, minutes=50), existing=source_state, seed=32
        )
        final_state = state_after(after, source_state)
        tail = _closing_changes(final_state, 4)
        messages = change_messages(after + tail, partitions=4, duplicates=0.02, reorder=0.01)
        produce(demo.kafka_bootstrap, topic, messages)
        print(
            f"   {len(after)} changes of 08:00-23:50 (+{len(messages) - len(after)} duplicates/closing) produced"
        )
        run = _dag(f"tidemark_ingest_{ORDERS}").test(logical_date=at(24, 30), run_after=at(24, 30))
        print(f"   ingest (seals every hour of 2026-11-22): {_states(run)}")
        print(
            "   merge: in production the scheduler starts it once all 24 hourly asset events of the day "
            "are in (partitioned-asset rollup); dag.test triggers it with the same partition"
        )
        run = _dag(f"tidemark_merge_{ORDERS}").test(
            logical_date=at(24, 40), run_after=at(24, 40), run_conf={"snapshot": "2026-11-22"}
        )
        print(f"   merge: {_states(run)}")
    finally:
        if service is not None:
            service.stop()
    return config, final_state


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def _check_snapshot(config: Any, settings: Settings, expected: dict[int, dict[str, Any]]) -> int:
    from tidemark.spark import build_session

    spark = build_session("tidemark-demo-orders", settings, hive=True)
    try:
        rows = spark.sql(
            f"SELECT order_id, version, status, CAST(amount AS STRING) AS amount FROM `{config.snapshot_table}` "
            "WHERE snapshot_dt = '2026-11-22'"
        ).collect()
        snapshots = spark.sql(f"SHOW PARTITIONS `{config.snapshot_table}`").collect()
    finally:
        spark.stop()
    got = sorted((r["order_id"], r["version"], r["status"], f"{float(r['amount']):.2f}") for r in rows)
    want = sorted(
        (k, int(v["version"]), v["status"], f"{float(v['amount']):.2f}") for k, v in expected.items()
    )
    print(f"\n{config.snapshot_table} partitions: {', '.join(r[0] for r in snapshots)}")
    ok = got == want
    print(
        f"snapshot 2026-11-22: {len(got)} orders; the source database's final state has {len(want)}: "
        f"{'OK, identical row by row' if ok else 'MISMATCH'}"
    )
    return 0 if ok else 1
