"""The Kafka Connect peer of bench/peers.py: the Apache Iceberg sink connector, standalone mode.

    python kc_iceberg_job.py BOOTSTRAP TOPIC TOTAL HOME JARS_DIR TASKS

Run with tidemark's venv (pyiceberg and confluent-kafka are there). What a team following the
connector's documentation would run on one machine:

- the table made beforehand in an Iceberg JDBC catalog on SQLite (the catalog tidemark's own
  Iceberg tables use by default), partitioned by ``hour(event_time)``, with the events' types
  (the connector converts the JSON strings: ISO timestamps, decimal amounts);
- its own control topic (one partition), made before the connector starts, as the docs ask;
- Kafka Connect's standalone worker (``ConnectStandalone``) with ``TASKS`` sink tasks, schemaless
  JSON values, the consumer's poll raised for throughput, and the sink's commit interval
  shortened from its 5-minute default (``iceberg.control.commit.interval-ms``) and the worker's
  offset flush from 60 s to 1 s (an idle task reads the sink's control events only between
  polls, and polls until the next flush), so that the bench measures writing, not waiting.

The run ends once the table's current snapshot holds all ``TOTAL`` records (read from the
catalog's SQLite row and the metadata file it names, every 0.2 s: no pyiceberg in the loop);
the worker is then stopped. Prints one JSON line last: the settings, the seconds from the
first task's start to the records visible, and the snapshots the connector committed.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

NAMESPACE, TABLE = "bench", "events"
CATALOG = "iceberg"  # the connector's default catalog name (iceberg.catalog)
COMMIT_INTERVAL_MS = 10_000
STALL_S = 300  # no new records committed for this long: the run fails
TASK_STARTED = "finished initialization and start"
# Kafka 4 logs through Log4j 2: INFO to stdout, where the task's start is read
LOG4J2 = """rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
"""


def connector_settings(bootstrap: str, topic: str, home: Path, tasks: int, run: str) -> dict[str, str]:
    """The connector's settings; ``run`` names it, its consumer group (``connect-<name>``, where
    the sink commits its offsets) and its control topic, so every run reads the topic whole."""
    return {
        "name": f"kc-iceberg-{run}",
        "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
        "tasks.max": str(tasks),
        "topics": topic,
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "errors.tolerance": "none",
        "iceberg.tables": f"{NAMESPACE}.{TABLE}",
        "iceberg.tables.auto-create-enabled": "false",
        "iceberg.catalog": CATALOG,
        "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "iceberg.catalog.uri": f"jdbc:sqlite:{home / 'catalog.db'}",
        "iceberg.catalog.warehouse": f"file://{home / 'warehouse'}",
        "iceberg.control.topic": f"control-iceberg-{run}",
        "iceberg.control.commit.interval-ms": str(COMMIT_INTERVAL_MS),
        "iceberg.kafka.bootstrap.servers": bootstrap,
    }


def worker_settings(bootstrap: str, home: Path) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "offset.storage.file.filename": str(home / "connect.offsets"),
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        # an idle sink task waits in poll() until the next offset flush (60 s by default) and
        # reads the sink's control events only in put(): without this, a drained topic waits
        # up to a minute per commit round (the sink commits its offsets itself)
        "offset.flush.interval.ms": "1000",
        "consumer.max.poll.records": "10000",
        "consumer.fetch.min.bytes": "1048576",
        "consumer.max.partition.fetch.bytes": "8388608",
        "listeners": "http://127.0.0.1:0",
    }


def create_table(home: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import HourTransform
    from pyiceberg.types import DecimalType, LongType, NestedField, StringType, TimestamptzType

    catalog = SqlCatalog(
        CATALOG, uri=f"sqlite:///{home / 'catalog.db'}", warehouse=f"file://{home / 'warehouse'}"
    )
    catalog.create_namespace(NAMESPACE)
    schema = Schema(
        NestedField(1, "event_id", StringType(), required=False),
        NestedField(2, "user_id", LongType(), required=False),
        NestedField(3, "app", StringType(), required=False),
        NestedField(4, "event_type", StringType(), required=False),
        NestedField(5, "amount", DecimalType(12, 2), required=False),
        NestedField(6, "event_time", TimestamptzType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(source_id=6, field_id=1000, transform=HourTransform(), name="event_hour")
    )
    catalog.create_table(f"{NAMESPACE}.{TABLE}", schema, partition_spec=spec)


def create_control_topic(bootstrap: str, control: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held while the futures run
    for future in admin.create_topics([NewTopic(control, 1, 1)]).values():
        future.result(30)


def committed(home: Path) -> tuple[int, int]:
    """(records in the current snapshot, snapshots) of the table, as its catalog row says now."""
    with sqlite3.connect(home / "catalog.db") as db:
        row = db.execute(
            "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?",
            (NAMESPACE, TABLE),
        ).fetchone()
    metadata = json.loads(Path(row[0].removeprefix("file:")).read_text())
    current = metadata.get("current-snapshot-id")
    snapshots = metadata.get("snapshots", [])
    for snapshot in snapshots:
        if snapshot["snapshot-id"] == current:
            return int(snapshot["summary"].get("total-records", 0)), len(snapshots)
    return 0, len(snapshots)


def write_properties(path: Path, settings: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))


def main(argv: list[str]) -> int:
    bootstrap, topic, total_arg, home_arg, jars, tasks_arg = argv
    total, home, tasks = int(total_arg), Path(home_arg), int(tasks_arg)
    home.mkdir(parents=True, exist_ok=True)
    connector = connector_settings(bootstrap, topic, home, tasks, uuid.uuid4().hex[:8])
    create_table(home)
    create_control_topic(bootstrap, connector["iceberg.control.topic"])  # one per connector, as the docs ask
    worker = worker_settings(bootstrap, home)
    write_properties(home / "worker.properties", worker)
    write_properties(home / "connector.properties", connector)
    command = [
        "java",
        "-Xmx2g",
        "-XX:+UseG1GC",
        f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
        "-cp",
        f"{jars}/*",
        "org.apache.kafka.connect.cli.ConnectStandalone",
        str(home / "worker.properties"),
        str(home / "connector.properties"),
    ]
    (home / "log4j2.properties").write_text(LOG4J2)
    started = time.perf_counter()
    first_task: list[float] = []
    log = (home / "connect.log").open("w")
    worker_proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def follow() -> None:
        assert worker_proc.stdout is not None
        for line in worker_proc.stdout:
            log.write(line)
            if not first_task and TASK_STARTED in line:
                first_task.append(time.perf_counter())

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    result: dict[str, Any] = {}
    try:
        rows = snapshots = 0
        progress = time.perf_counter()
        while rows < total:
            if worker_proc.poll() is not None:
                raise SystemExit(
                    f"Kafka Connect exited with {worker_proc.returncode}: see {home / 'connect.log'}"
                )
            if time.perf_counter() - progress > STALL_S:
                raise SystemExit(
                    f"no commit for {STALL_S} s at {rows} of {total} records: see {home / 'connect.log'}"
                )
            time.sleep(0.2)
            seen = committed(home)
            if seen[0] > rows:
                progress = time.perf_counter()
            rows, snapshots = seen
        visible = time.perf_counter()
        processing_from = first_task[0] if first_task else started
        result = {
            "settings": {
                **{k: v for k, v in connector.items() if k not in ("name", "iceberg.control.topic")},
                **worker,
            },
            "job_wall_s": round(visible - processing_from, 2),
            "worker_start_s": round(processing_from - started, 2),
            "rows": rows,
            "snapshots": snapshots,
        }
    finally:
        worker_proc.terminate()
        try:
            worker_proc.wait(60)
        except subprocess.TimeoutExpired:
            worker_proc.kill()
        follower.join(5)
        log.close()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
