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

from tidemark.airflow_env import HIVE_METASTORE_POOL, airflow_environment
from tidemark.generator import Message, create_topic, events, produce, records
from tidemark.services import BrokerService
from tidemark.settings import Settings

log = logging.getLogger(__name__)

DAY = datetime(2026, 11, 22, tzinfo=UTC)
TABLE = "events"


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
    data = yaml.safe_load((base.conf_dir / f"{TABLE}.yaml").read_text())
    data["source"]["topic"] = f"tidemark-demo-{uuid.uuid4().hex[:8]}"  # never mixes with old data
    (conf_dir / f"{TABLE}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return replace(base, home=home, conf_dir=conf_dir, warehouse=str(home / "warehouse"))


def _prepare_airflow(settings: Settings) -> Any:
    os.environ.update(airflow_environment(settings))
    os.environ["TIDEMARK_WAREHOUSE"] = settings.warehouse
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.pool import Pool
    from airflow.utils.db import initdb

    initdb()
    Pool.create_or_update_pool(HIVE_METASTORE_POOL, 1, "one Derby metastore client at a time", False)
    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).get_dag(f"tidemark_ingest_{TABLE}")
    if dag is None:
        raise RuntimeError(f"DAG tidemark_ingest_{TABLE} was not built from {settings.conf_dir}")
    return dag


def run_demo(settings: Settings | None = None, *, scale: int = 6_000) -> int:
    base = settings or Settings.from_env()
    demo = _demo_settings(base)
    broker = BrokerService(base)
    started_here = not broker.status().running
    broker.start()
    try:
        from tidemark.config import load_table
        from tidemark.status import explain_partition, render, render_partition, table_status

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
                print(render_partition(explain_partition(config, demo, "2026-11-22T08")), flush=True)
            if states.get("check_deadlines") == "failed":
                print(
                    "   check_deadlines is the alert for hours still unsealed at their end + commit delay + "
                    "seal_grace: here one MQ partition went quiet and holds them until it counts as idle",
                    flush=True,
                )
        print()
        print(render(table_status(config, demo)))
        return _report(config, demo, produced)
    finally:
        if started_here:
            broker.stop()


def _report(config: Any, settings: Settings, produced: int) -> int:
    from tidemark.commitlog import CommitLog
    from tidemark.spark import build_session

    state = CommitLog(settings.state_location, config.table).state()
    spark = build_session("tidemark-demo-report", settings, hive=True)
    try:
        print("\nhours registered in the metastore (Spark SQL):")
        per_hour = spark.sql(
            f"SELECT dt, hr, count(*) AS n FROM `{config.table}` GROUP BY dt, hr ORDER BY dt, hr"
        ).collect()
        for r in spark.sql(f"SHOW PARTITIONS `{config.table}`").collect():
            n = next((x["n"] for x in per_hour if f"dt={x['dt']}/hr={x['hr']}" == r[0]), 0)
            print(f"  {r[0]}: {n} rows")
        sealed_rows = sum(int(x["n"]) for x in per_hour)
        late = spark.sql(
            f"SELECT dt, hr, count(*) AS n FROM `{config.late_table}` GROUP BY dt, hr ORDER BY dt, hr"
        ).collect()
        print("late rows (events__late): " + ", ".join(f"dt={x['dt']}/hr={x['hr']}: {x['n']}" for x in late))
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
