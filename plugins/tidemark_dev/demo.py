"""`make demo`: the ingest DAG through Airflow, end to end on embedded defaults.

In a home of its own (``$TIDEMARK_HOME/demo``, recreated each time) it starts the local broker
(Apache Kafka, ``tidemark_dev.kafka``: its data under ``$TIDEMARK_HOME/kafka``) unless one runs, creates a fresh topic with 4 MQ partitions for the ``events`` table and runs
``tidemark_ingest_events`` three times with ``dag.test()`` (dump -> seal -> announce, the real
SparkSubmitOperator), producing a generated clickstream between runs:

1. hours 08:00-10:30 on MQ partitions 0-2 with disorder inside the tolerance; partition 3 only
   sends 08:00-08:20 and then goes quiet: it holds every hour back;
2. 10:30-11:00: partition 3 has been quiet for ``idle_timeout``, stops holding: 08 and 09 seal;
3. 11:00-11:30 plus records for 08 and 09, which are sealed by then: late (``events__late``).

Then the upgrade path: the table is switched to the stream (``tidemark switch``), which
commits two waves of records within seconds and seals hour 11 by itself, then switched back;
a fourth ingest run goes on where the stream stopped.

Each run's processing time is its logical date (a fixed timeline, so the demo is reproducible).
At the end it queries the metastore with Spark SQL and prints the registered hours, rows per
hour, late and dirty counts and ``produced == rows + dirty + late``.

The terminal gets the story, one line per step (``console.Console``); everything Airflow,
Spark and the JVM print goes to a log file per step under ``<demo home>/logs``.

Then ``events_avro`` (``demo_avro.py``): the same clickstream in Avro behind a Schema
Registry (a stand-in), one ingest run, reconciled like the JSON table. And ``events_iceberg``
(``demo_iceberg.py``): the clickstream as an Iceberg table, one snapshot per sealed hour, read
back by name by pyiceberg and DuckDB.

Then the orders path (full + periodic increment): order changes of 06:00-08:00 go to the
``orders`` topic and into the source (PostgreSQL through JDBC when the server is installed,
Parquet files otherwise); ``tidemark_bootstrap_orders`` reads the source at 08:00, aligned to
the topic's offsets; the rest of the day's changes (inserts, updates, deletes, a few sent twice
or out of order) arrive; ``tidemark_ingest_orders`` seals every hour of the day and
``tidemark_merge_orders`` builds snapshot ``2026-11-22``, which the demo compares row by row
with the source database's own final state.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from tidemark.catalog import load_table
from tidemark.jobs import SparkJob, spark_environment
from tidemark.observe.status import render, render_stream, stream_summary, table_status
from tidemark.settings import Settings
from tidemark.spark import JDBC_DRIVER_JARS, build_session
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.mode import TableWriter
from tidemark.stream.status import StreamStatus
from tidemark.time.hours import hour_path
from tidemark_dev.airflow_env import HIVE_METASTORE_POOL, airflow_environment, metastore_pool
from tidemark_dev.console import Console
from tidemark_dev.demo_avro import AVRO_TABLE, run_avro, write_avro_config
from tidemark_dev.demo_iceberg import ICEBERG_TABLE, run_iceberg, write_iceberg_config
from tidemark_dev.derby_metastore import DerbyMetastoreService
from tidemark_dev.generator import (
    Message,
    change_messages,
    create_topic,
    events,
    order_changes,
    produce,
    records,
    state_after,
)
from tidemark_dev.kafka import KafkaService
from tidemark_dev.net import free_port
from tidemark_dev.pgsource import ORDERS_COLUMNS, ORDERS_DDL, replace_table
from tidemark_dev.postgres import POSTGRES_PASSWORD, POSTGRES_USER, PostgresService, postgres_url
from tidemark_dev.schema_registry import SchemaRegistryStandIn

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


def _start_metastore(demo: Settings) -> tuple[Settings, DerbyMetastoreService | None]:
    """The demo home's metastore service, over its Derby database, as ``make up`` runs one: the
    seals register over Thrift and start no JVM. A metastore named by TIDEMARK_HIVE_METASTORE_URIS
    is used instead."""
    if "TIDEMARK_HIVE_METASTORE_URIS" in os.environ:
        return demo, None
    service = DerbyMetastoreService(replace(demo, metastore_port=free_port()))
    service.start()
    return replace(demo, hive_metastore_uris=service.address()), service


def run_demo(settings: Settings | None = None, *, scale: int = 6_000) -> int:
    """The demo's story on the terminal (one line per step, at most ~80), every Airflow and
    Spark log in ``<demo home>/logs``; 0 when both reconciliations hold."""
    base = settings or Settings.from_env()
    demo = _demo_settings(base)
    registry = SchemaRegistryStandIn().start()
    write_avro_config(
        demo.conf_dir,
        base.conf_dir / f"{TABLE}.yaml",
        f"tidemark-demo-{AVRO_TABLE}-{uuid.uuid4().hex[:8]}",
        registry.url,
    )
    write_iceberg_config(
        demo.conf_dir,
        base.conf_dir / f"{TABLE}.yaml",
        f"tidemark-demo-{ICEBERG_TABLE}-{uuid.uuid4().hex[:8]}",
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its goodbye at exit is not the story's
    console = Console(demo.home / "logs")
    say = console.say
    say("tidemark demo: the events and orders pipelines through Airflow (dag.test) on embedded defaults")
    say(f"  home {demo.home}; Airflow, Spark and JVM output goes to {console.log_dir}/")
    broker = KafkaService(base)
    started_here = not broker.status().running
    metastore = None
    try:
        with console.step("setup", f"starting the broker ({base.kafka_bootstrap}) and Airflow's database"):
            broker.start()
            demo, metastore = _start_metastore(demo)
            dag = _prepare_airflow(demo)
        produced = _run_events(console, demo, dag, scale)
        produced += _run_stream(console, demo, dag, scale)
        orders, final_state = _run_orders(console, demo, base, scale)
        avro_ok = run_avro(console, demo, _dag(f"tidemark_ingest_{AVRO_TABLE}"), at(8), scale)
        iceberg_ok = run_iceberg(console, demo, _dag(f"tidemark_ingest_{ICEBERG_TABLE}"), at(8), scale)
        # In-process Spark last: its JVM keeps the embedded Derby metastore booted until exit,
        # and a spark-submit job started after it could not open the metastore.
        events_ok = _check_events(console, demo, produced)
        with console.step("orders-check", "checking the merged snapshot against the source (Spark SQL)"):
            orders_ok = _check_snapshot(orders, demo, final_state)
        say(orders_ok[1])
        ok = events_ok and orders_ok[0] and avro_ok and iceberg_ok
        say("")
        say("where to look next:")
        say(f"  TIDEMARK_HOME={demo.home} tidemark status --table {TABLE} --hour 2026-11-22T08")
        say(f"  TIDEMARK_HOME={demo.home} tidemark report --table {TABLE}    (the health page)")
        say("  make up    (Airflow UI on http://127.0.0.1:8080, the DAGs with their trigger forms)")
        say(f"logs: {console.log_dir}/ ({', '.join(f.name for f in console.files)})")
        say(f"demo {'OK' if ok else 'FAILED: see the lines above'}")
        return 0 if ok else 1
    except Exception as exc:  # the story ends with the error and where to read more
        say(f"demo failed: {type(exc).__name__}: {exc}")
        say(f"  the logs: {', '.join(str(f) for f in console.files)}")
        return 1
    finally:
        try:
            registry.stop()
            if metastore is not None:
                metastore.stop()
            if started_here:
                broker.stop()
        finally:
            console.close()


def _run_events(console: Console, demo: Settings, dag: Any, scale: int) -> int:
    """Three ingest runs of the events table, each explained in a line or two, then its
    status; returns the number of messages produced."""

    say = console.say
    config = load_table(TABLE, demo)
    create_topic(demo.kafka_bootstrap, config.source.topic, 4)
    say(f"events: topic {config.source.topic} with 4 MQ partitions; table {TABLE} (hourly, UTC)")
    produced = 0
    for i, (processing, messages) in enumerate(_phases(scale), start=1):
        produced += len(produce(demo.kafka_bootstrap, config.source.topic, messages))
        before = CommitLog(demo.state_location, TABLE).state()
        sealed_before = set(HourJournal(demo.state_location, TABLE).state().hours)
        title = f"run {i}/3 at {processing:%H:%M}: {len(messages):,} messages; ingest DAG"
        with console.step(f"events-run-{i}", title):
            run = dag.test(logical_date=processing, run_after=processing)
        states = _states(run)
        say("   " + ", ".join(f"{task} {state}" for task, state in states.items()))
        after = CommitLog(demo.state_location, TABLE).state()
        sealed = sorted(set(HourJournal(demo.state_location, TABLE).state().hours) - sealed_before)
        say(
            f"   rows {after.rows - before.rows:,}, dirty {after.dirty - before.dirty}, late "
            f"{after.late - before.late}; sealed and registered: {', '.join(sealed) or 'none yet'}; "
            f"global ready time {after.ready.time if after.ready else None}"
        )
        if states.get("check_deadlines") == "failed":
            say(
                "   check_deadlines failed on purpose: MQ partition 3 went quiet at 08:20 and holds the "
                "hours back until it counts as idle (idle_timeout 30m); this is the alert an on-call "
                "engineer gets (a named SealDeadlineMissedError, its traceback is in the log), not a crash"
            )
        if after.late > before.late:
            say(f"   late records for already sealed hours went to {config.late_table}, counted, not lost")
    say("")
    for line in render(table_status(config, demo)).splitlines():
        say(line)
    return produced


STREAM_CLOCK = at(12, 10)  # the continuous phase's processing time starts here (the demo's timeline)


def _run_stream(console: Console, demo: Settings, dag: Any, scale: int) -> int:
    """The upgrade path: the table is handed to the stream (``tidemark switch``), which runs
    micro-batches over two waves of new records and seals hour 11 by itself; then it is handed
    back, the stream stops after its micro-batch and the ingest DAG goes on where it stopped.
    Returns the number of messages produced."""

    say = console.say
    config = load_table(TABLE, demo)
    topic = config.source.topic
    writer = TableWriter(demo.state_location, TABLE)
    say("")
    say("the upgrade path: continuous ingestion of events on the same commit log")
    writer.switch("stream", by="demo", reason="minutes-fresh data", at=STREAM_CLOCK.isoformat())
    say(f"   tidemark switch --table {TABLE} --to stream: the ingest DAG's dumps now skip")
    command = SparkJob(
        "stream",
        TABLE,
        ["--run-id", "demo-stream", "--trigger-interval", "2s", "--clock-from", STREAM_CLOCK.isoformat()],
    ).command(demo)
    log_file = console.log_dir / "stream.log"
    produced = 0
    before = CommitLog(demo.state_location, TABLE).state()
    with log_file.open("ab") as out:
        stream = subprocess.Popen(command, env=spark_environment(demo), stdout=out, stderr=subprocess.STDOUT)
    try:
        waves = [
            list(events(scale // 10, start=at(11, 30), span=timedelta(minutes=30), partitions=4, seed=6)),
            list(events(scale // 10, start=at(12), span=timedelta(minutes=20), partitions=4, seed=7)),
        ]
        for i, wave in enumerate(waves, start=1):
            produced += len(produce(demo.kafka_bootstrap, topic, wave))
            target = produced
            with console.step(
                f"stream-wave-{i}", f"   wave {i}: {len(wave):,} records while the stream runs"
            ):
                started = time.monotonic()
                while _records(CommitLog(demo.state_location, TABLE).state()) - _records(before) < target:
                    if stream.poll() is not None:
                        raise RuntimeError(f"the stream exited ({stream.returncode}); see {log_file}")
                    if time.monotonic() - started > 240:
                        raise RuntimeError(f"the stream did not commit wave {i} in 4 minutes; see {log_file}")
                    time.sleep(1)
            committed_s = time.monotonic() - started
            status = _status_through(
                demo, CommitLog(demo.state_location, TABLE).state().last_committed, stream
            )
            say(
                f"   committed {committed_s:.0f}s after producing: micro-batch "
                f"{status.get('last_epoch')}, batch {status.get('last_batch_id')}; sealed by the stream: "
                f"{', '.join(status.get('sealed', [])) or 'nothing yet'}"
            )
        with console.step("stream-seal", "   waiting for the stream to seal hour 11 (ready time past 12:05)"):
            started = time.monotonic()
            while "2026-11-22T11" not in HourJournal(demo.state_location, TABLE).state().hours:
                if stream.poll() is not None or time.monotonic() - started > 180:
                    raise RuntimeError(f"the stream did not seal hour 11; see {log_file}")
                time.sleep(1)
        writer.switch("batch", by="demo", reason="demo over", at=at(12, 20).isoformat())
        with console.step("stream-stop", f"   tidemark switch --table {TABLE} --to batch: the stream stops"):
            code = stream.wait(timeout=120)
        say(f"   the stream stopped by itself (exit {code}) after its micro-batch; its log: {log_file}")

        for line in render_stream(stream_summary(config, demo)):
            say("  " + line)
    finally:
        if stream.poll() is None:
            stream.kill()
    late = list(events(scale // 20, start=at(12, 15), span=timedelta(minutes=15), partitions=4, seed=8))
    produced += len(produce(demo.kafka_bootstrap, topic, late))
    with console.step("events-run-4", "run 4/4 at 12:30: the ingest DAG goes on where the stream stopped"):
        run = dag.test(logical_date=at(12, 30), run_after=at(12, 30))
    say("   " + ", ".join(f"{task} {state}" for task, state in _states(run).items()))
    return produced


def _records(state: Any) -> int:
    """Records committed so far (rows, dirty and late)."""
    return int(state.rows + state.dirty + state.late)


def _check_events(console: Console, demo: Settings, produced: int) -> bool:
    console.say("")
    with console.step("events-check", "events: reading the registered hours back (Spark SQL)"):
        ok, lines = _report(load_table(TABLE, demo), demo, produced)
    for line in lines:
        console.say(line)
    return ok


def _report(config: Any, settings: Settings, produced: int) -> tuple[bool, list[str]]:
    state = CommitLog(settings.state_location, config.table).state()
    spark = build_session("tidemark-demo-report", settings, hive=True)
    try:
        per_hour = spark.sql(
            f"SELECT dt, hr, count(*) AS n FROM `{config.table}` GROUP BY dt, hr ORDER BY dt, hr"
        ).collect()
        registered = [r[0] for r in spark.sql(f"SHOW PARTITIONS `{config.table}`").collect()]
        late = spark.sql(
            f"SELECT dt, hr, count(*) AS n FROM `{config.late_table}` GROUP BY dt, hr ORDER BY dt, hr"
        ).collect()
    finally:
        spark.stop()
    counts = {hour_path(x["dt"], x["hr"]): int(x["n"]) for x in per_hour}
    sealed_rows = sum(counts.values())
    total = state.rows + state.dirty + state.late
    ok = total == produced
    return ok, [
        "   hours in the metastore: " + ", ".join(f"{h} ({counts.get(h, 0):,} rows)" for h in registered),
        f"   {config.late_table}: " + ", ".join(f"{hour_path(x['dt'], x['hr'])}: {x['n']}" for x in late),
        f"   reconciliation: produced {produced:,} == rows {state.rows:,} (sealed {sealed_rows:,} + open "
        f"{state.rows - sealed_rows:,}) + dirty {state.dirty} + late {state.late}: {'OK' if ok else 'MISMATCH'}",
    ]


# -- the orders path: bootstrap + hourly increments + daily merge ---------------------------------
def _postgres_available() -> bool:
    return bool(glob.glob("/usr/lib/postgresql/*/bin/postgres")) and os.path.isfile(JDBC_DRIVER_JARS[0])


def _source_form(
    demo: Settings, base: Settings, state: dict[int, dict[str, Any]]
) -> tuple[dict[str, Any], Any, str]:
    """Load the source (PostgreSQL when installed, else Parquet files); the trigger form for it,
    the service to stop afterwards (None if none was started here) and what it is, in words."""

    if _postgres_available():
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
        described = (
            f"PostgreSQL table orders_source on {postgres_url(demo)} ({len(state):,} rows), read over JDBC"
        )
        return form, service if started else None, described
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
    described = f"Parquet export {export} ({len(state):,} rows; PostgreSQL is not installed)"
    return {"source_kind": "parquet", "source": str(export)}, None, described


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


def _run_orders(
    console: Console, demo: Settings, base: Settings, scale: int
) -> tuple[Any, dict[int, dict[str, Any]]]:
    """The orders DAG runs; returns the config and the source's final state to check against."""

    say = console.say
    config = load_table(ORDERS, demo)
    topic = config.source.topic
    create_topic(demo.kafka_bootstrap, topic, 4)
    before = order_changes(scale // 3, start=at(6), span=timedelta(hours=2), seed=31)
    source_state = state_after(before)
    produce(demo.kafka_bootstrap, topic, change_messages(before, partitions=4))
    say("")
    say(
        f"orders (full + periodic increment): {len(before):,} changes of 06:00-08:00 in topic {topic} and the source"
    )
    with console.step("orders-source", "   loading the source database"):
        form, service, described = _source_form(demo, base, source_state)
    say(f"   source: {described}")
    try:
        with console.step(
            "orders-bootstrap", "   bootstrap DAG: the full snapshot at 08:00, aligned to the topic"
        ):
            run = _dag(f"tidemark_bootstrap_{ORDERS}").test(
                logical_date=at(8), run_after=at(8), run_conf=form
            )
        say("   " + ", ".join(f"{task} {state}" for task, state in _states(run).items()))
        after = order_changes(
            scale, start=at(8), span=timedelta(hours=15, minutes=50), existing=source_state, seed=32
        )
        final_state = state_after(after, source_state)
        tail = _closing_changes(final_state, 4)
        messages = change_messages(after + tail, partitions=4, duplicates=0.02, reorder=0.01)
        produce(demo.kafka_bootstrap, topic, messages)
        say(
            f"   {len(after):,} changes of 08:00-23:50 produced, {len(messages) - len(after)} of them duplicates or late"
        )
        with console.step("orders-ingest", "   ingest DAG: seal every hour of 2026-11-22"):
            run = _dag(f"tidemark_ingest_{ORDERS}").test(logical_date=at(24, 30), run_after=at(24, 30))
        say("   " + ", ".join(f"{task} {state}" for task, state in _states(run).items()))
        # In production the scheduler starts the merge once all 24 hourly asset events of the day
        # are in (partitioned-asset rollup); dag.test triggers it with the same partition.
        with console.step(
            "orders-merge", "   merge DAG: snapshot 2026-11-22 = bootstrap + the day's sealed hours"
        ):
            run = _dag(f"tidemark_merge_{ORDERS}").test(
                logical_date=at(24, 40), run_after=at(24, 40), run_conf={"snapshot": "2026-11-22"}
            )
        say("   " + ", ".join(f"{task} {state}" for task, state in _states(run).items()))
    finally:
        if service is not None:
            service.stop()
    return config, final_state


def _states(run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def _check_snapshot(config: Any, settings: Settings, expected: dict[int, dict[str, Any]]) -> tuple[bool, str]:
    spark = build_session("tidemark-demo-orders", settings, hive=True)
    try:
        rows = spark.sql(
            f"SELECT order_id, version, status, CAST(amount AS STRING) AS amount FROM `{config.snapshot_table}` "
            "WHERE snapshot_dt = '2026-11-22'"
        ).collect()
    finally:
        spark.stop()
    got = sorted((r["order_id"], r["version"], r["status"], f"{float(r['amount']):.2f}") for r in rows)
    want = sorted(
        (k, int(v["version"]), v["status"], f"{float(v['amount']):.2f}") for k, v in expected.items()
    )
    ok = got == want
    return ok, (
        f"   {config.snapshot_table} 2026-11-22: {len(got):,} orders; the source database's final state has "
        f"{len(want):,}: {'OK, identical row by row' if ok else 'MISMATCH'}"
    )


def _status_through(demo: Settings, batch_id: int, stream: Any) -> dict[str, Any]:
    """The stream's status record once it reports ``batch_id``: a micro-batch writes it after
    its commit and seal, so read right after the commit it still names the previous one."""

    deadline = time.monotonic() + 60
    while True:
        status = StreamStatus(demo.state_location, TABLE).read() or {}
        reported = status.get("last_batch_id")
        if (reported is not None and reported >= batch_id) or stream.poll() is not None:
            return status
        if time.monotonic() > deadline:
            return status
        time.sleep(0.5)
