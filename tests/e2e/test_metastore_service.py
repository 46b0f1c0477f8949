"""The Hive metastore as a service (the Thrift metastore of the pyspark wheel's jars on
tidemark's own PostgreSQL, `tidemark-dev services start postgres metastore`): jobs that embedded
Derby admits one at a time run at once. A seal of one table, a rebuild of another's hour and
the merge of a third (CDC) table's snapshot, three spark-submit processes through the CLI at
once, all register their partitions, exactly."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tests.helpers.jobs import job_result
from tests.helpers.metastore import metastore_service
from tests.helpers.orders import Row, normal, send, truth, write_parquet_source
from tests.helpers.tables import at, fresh_table
from tidemark.config import load_table_file
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.snapshot.bootstrap import run_bootstrap
from tidemark.snapshot.snapshots import SnapshotLog, SnapshotStore
from tidemark.snapshot.sources import BootstrapSource
from tidemark.state.journal import HourJournal
from tidemark_dev.generator import create_topic, order_changes, produce, records, state_after
from tidemark_dev.pgsource import psql
from tidemark_dev.postgres import metastore_database

pytestmark = pytest.mark.e2e

HOUR = "2026-11-22T10"


@pytest.fixture(scope="module")
def metastore(settings: Settings, postgres: str) -> Iterator[Settings]:
    """The metastore service on a free port; yields settings that point jobs at it."""
    with metastore_service(settings) as own:
        yield own


def registered(settings: Settings) -> set[tuple[str, str]]:
    """(table, partition) pairs in the service's database, read with psql."""
    query = 'SELECT t."TBL_NAME", p."PART_NAME" FROM "PARTITIONS" p JOIN "TBLS" t ON p."TBL_ID" = t."TBL_ID"'
    out = psql(settings, query, database=metastore_database(settings))
    return {tuple(line.split("|")) for line in out.splitlines() if line}  # type: ignore[misc]


def cli(settings: Settings, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "TIDEMARK_HOME": str(settings.home),
        "TIDEMARK_CONF_DIR": str(settings.conf_dir),
        "TIDEMARK_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "TIDEMARK_HIVE_METASTORE_URIS": settings.hive_metastore_uris,
    }
    tidemark = str(Path(sys.executable).parent / "tidemark")
    return subprocess.Popen(
        [tidemark, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finished(process: subprocess.Popen[str]) -> str:
    out, _ = process.communicate(timeout=420)
    assert process.returncode == 0, out[-4000:]
    return out


def merge_ready_orders(spark: Any, broker: str, metastore: Settings, tmp_path: Path) -> tuple[str, list[Row]]:
    """An orders table bootstrapped at 10:00 (in-process) and its hour 10 sealed: what a merge
    of 2026-11-22T10 needs; returns the table and the snapshot that merge must give."""
    (tmp_path / "orders").mkdir()
    config, settings = fresh_table(
        metastore, tmp_path / "orders", template="orders", cdc__snapshot_every="hour"
    )
    create_topic(broker, config.source.topic, 2)
    before = order_changes(40, start=at(9), seed=21)
    state = state_after(before)
    send(broker, config, before)
    source = BootstrapSource("parquet", str(write_parquet_source(tmp_path / "orders" / "src", state)))
    run_bootstrap(spark, config, settings, "boot-1", source, as_of=at(10), label="base")
    after = order_changes(30, start=at(10), span=at(11, 30) - at(10), existing=state, seed=22)
    send(broker, config, after)
    run_dump(spark, config, settings, "run-1", at(11, 40))
    run_seal(spark, config, settings, "run-1")
    expected = truth(
        state_after([c for c in after if datetime.fromisoformat(c["updated_at"]) < at(11)], state)
    )
    return config.table, expected


def test_a_seal_a_rebuild_and_a_merge_at_once_on_the_metastore_service(
    spark: Any, broker: str, metastore: Settings, tmp_path: Path
) -> None:
    tables = []
    for _ in range(2):
        config, settings = fresh_table(metastore, tmp_path)
        create_topic(broker, config.source.topic, 2)
        items = [(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 15)] + [
            (0, at(11, 50)),
            (1, at(11, 45)),
        ]
        produce(broker, config.source.topic, records(items))
        run_dump(spark, config, settings, "run-1", at(12))  # the dump does not use the metastore
        tables.append(config.table)
    sealed, rebuilt = tables
    # the hour to rebuild is sealed first, in-process (registered in that session's Derby): the
    # rebuild registers it in the service, as it would a table moved to it
    run_seal(spark, load_table_file(settings.conf_dir / f"{rebuilt}.yaml"), settings, "seal-1")
    orders, expected = merge_ready_orders(spark, broker, metastore, tmp_path)
    orders_conf = tmp_path / "orders" / "conf"

    # Embedded Derby admits one of these at a time (the hive_metastore pool of one slot).
    running = [
        cli(settings, "seal", "--table", sealed, "--run-id", "seal-1"),
        cli(settings, "rebuild", "--table", rebuilt, "--hours", HOUR, "--run-id", "rebuild-1"),
        cli(
            replace(settings, conf_dir=orders_conf),
            "merge",
            "--table",
            orders,
            "--snapshot",
            HOUR,
            "--run-id",
            "merge-1",
        ),
    ]
    outputs = [finished(process) for process in running]
    # the seal registered over Thrift, not through a Hive client of its own
    assert f"{sealed}: registering partitions over the metastore service's Thrift API" in outputs[0]
    assert {(t, "dt=2026-11-22/hr=10") for t in tables} <= registered(settings)
    assert (f"{orders}_snapshot", f"snapshot_dt={HOUR}") in registered(settings)
    (merged,) = [r for r in SnapshotLog(settings.state_dir, orders).records() if r.label == HOUR]
    assert merged.rows == len(expected)
    store = SnapshotStore(spark, load_table_file(orders_conf / f"{orders}.yaml"), settings)
    rows = sorted(normal(r) for r in pq.read_table(store.partition_dir(HOUR)).to_pylist())
    assert rows == expected
    for table in tables:
        entry = HourJournal(settings.state_dir, table).state().hours[HOUR]
        assert entry.rows == 8 and entry.published
    assert HourJournal(settings.state_dir, rebuilt).state().hours[HOUR].version == 2


def test_a_seal_over_the_metastore_service_starts_no_jvm_once_its_table_exists(
    spark: Any, broker: str, metastore: Settings, tmp_path: Path
) -> None:
    """`tidemark seal` (as the DAG's seal task) runs as a Python process: its hours are small,
    so pyarrow compacts and checks them, and it registers them over Thrift. Spark starts only
    for what needs it, here the table's creation by the first seal."""
    config, settings = fresh_table(metastore, tmp_path)
    create_topic(broker, config.source.topic, 2)
    hour_10 = [(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 15)]
    produce(broker, config.source.topic, records([*hour_10, (0, at(11, 50)), (1, at(11, 45))]))
    run_dump(spark, config, settings, "run-1", at(12))
    first = finished(cli(settings, "seal", "--table", config.table, "--run-id", "seal-1"))
    assert job_result(first)["sealed"] == ["2026-11-22T10"]
    assert job_result(first)["spark_started"] is True
    assert "starting Spark, first needed by seal/metastore.py" in first  # to create the table

    produce(
        broker,
        config.source.topic,
        records([(0, at(11, 5)), (1, at(11, 20)), (0, at(12, 50)), (1, at(12, 45))], prefix="s"),
    )
    run_dump(spark, config, settings, "run-2", at(13))
    second = finished(cli(settings, "seal", "--table", config.table, "--run-id", "seal-2"))
    result = job_result(second)
    assert result["sealed"] == ["2026-11-22T11"] and result["spark_started"] is False, second[-3000:]
    assert "starting Spark" not in second and "SparkContext" not in second
    assert {(config.table, f"dt=2026-11-22/hr={h}") for h in ("10", "11")} <= registered(settings)
    entry = HourJournal(settings.state_dir, config.table).state().hours["2026-11-22T11"]
    assert entry.rows == 4 and entry.published
    # the hour Spark never saw written reads back in Spark, through the service
    rows = spark.read.parquet(
        str(Path(settings.warehouse) / config.table / "dt=2026-11-22" / "hr=11")
    ).count()
    assert rows == 4
