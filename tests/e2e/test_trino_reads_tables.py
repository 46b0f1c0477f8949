"""Trino (476, from Maven Central, on the Temurin JDK 25) reads tidemark's tables by name.

An Iceberg table through Airflow (dag.test): the ingest DAG's spark-submit jobs dump and seal
it into a PostgreSQL Iceberg catalog, its maintenance DAG runs; then Trino reads the sealed
hour by name through its Iceberg connector on the same catalog, equal row by row to
pyiceberg's read; the snapshot's summary is Trino's to read too. A CDC table's Iceberg
snapshot (``cdc.snapshot_format: iceberg``, bootstrapped by its spark-submit job) is read by
name, its label by tag; a Delta snapshot, registered by its job in the Hive metastore service
as a Delta table, is read by Trino's Delta Lake connector by name, its label by version."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dags import run_dag
from tests.helpers.iceberg import pyiceberg_rows, snapshots_of
from tests.helpers.metastore import metastore_service
from tests.helpers.orders import Row, keyed_once, normal, truth, write_parquet_source
from tests.helpers.tables import at, fresh_table
from tidemark.settings import Settings
from tidemark.snapshot.snapshots import SnapshotLog
from tidemark_dev.generator import create_topic, order_changes, produce, records, state_after
from tidemark_dev.net import free_port
from tidemark_dev.postgres import POSTGRES_PASSWORD, POSTGRES_USER
from tidemark_dev.trino import DELTA_CATALOG, TrinoService

pytestmark = pytest.mark.e2e


@pytest.fixture
def on_postgres(dag_env: Settings, postgres: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The DAGs' settings with the Iceberg catalog on tidemark's PostgreSQL (Trino reads no
    SQLite), for the jobs too."""
    user = f"{POSTGRES_USER}:{POSTGRES_PASSWORD}"
    url = f"postgresql+pg8000://{user}@127.0.0.1:{dag_env.postgres_port}/postgres"
    monkeypatch.setenv("TIDEMARK_ICEBERG_CATALOG_URI", url)
    return replace(dag_env, iceberg_catalog_uri=url)


@pytest.fixture
def metastore(settings: Settings, on_postgres: Settings) -> Iterator[Settings]:
    """``on_postgres`` with the Hive metastore as a Thrift service (what Trino's Delta Lake
    connector reads; the service runs beside the test run's PostgreSQL, in its home); the
    DAGs keep their embedded one."""
    with metastore_service(settings) as service:
        uris, port = service.hive_metastore_uris, service.metastore_port
        yield replace(on_postgres, hive_metastore_uris=uris, metastore_port=port)


@pytest.fixture
def trino(metastore: Settings) -> Iterator[TrinoService]:
    service = TrinoService(metastore, free_port())
    service.start()
    try:
        yield service
    finally:
        service.stop()


def test_the_dags_land_an_iceberg_table_and_snapshots_that_trino_reads_by_name(
    broker: str,
    on_postgres: Settings,
    metastore: Settings,
    trino: TrinoService,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, settings = fresh_table(on_postgres, tmp_path, output__table_format="iceberg")
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(settings.conf_dir))
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 2)
    sent = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in (*range(0, 60, 10), 110)]))
    states = run_dag(f"tidemark_ingest_{table}", at(12))
    assert set(states.values()) == {"success"}, states
    assert [s["tidemark.hour"] for s in snapshots_of(settings, table)] == ["2026-11-22T10"]
    assert run_dag(f"tidemark_maintain_{table}", at(12)) == {
        "retention": "success",  # conf/tables/events.yaml keeps 90 days: nothing that old
        "compact": "success",  # nothing amended: nothing to merge back
        "expire_snapshots": "success",
        "verify": "success",
    }
    assert len(snapshots_of(settings, table)) == 1  # within the retention: nothing expired

    cursor = trino.connect().cursor()
    cursor.execute(f"SELECT _mq_partition, _mq_offset, event_id, dt, hr FROM {table} WHERE hr = '10'")
    found = cursor.fetchall()
    expected = {(p, o): json.loads(m.value or b"{}")["event_id"] for p, o, m in sent if o < 6}
    assert {(p, o): e for p, o, e, _, _ in found} == expected == pyiceberg_rows(settings, table, hour="10")
    assert {(dt, hr) for *_, dt, hr in found} == {("2026-11-22", "10")}  # from the manifests
    cursor.execute(f'SELECT summary FROM "{table}$snapshots"')
    # main's snapshot (the fresh branch's, made by the same jobs, name no hour)
    (summary,) = (row[0] for row in cursor.fetchall() if "tidemark.hour" in row[0])
    assert (summary["tidemark.hour"], summary["tidemark.version"]) == ("2026-11-22T10", "1")

    # a CDC table's snapshot in the same catalog, bootstrapped by its DAG (spark-submit gets
    # Iceberg's runtime at launch): Spark's overwrite on the job's executors, the label a tag,
    # Trino reads the table by name and the label by the tag
    orders, _ = fresh_table(on_postgres, tmp_path, template="orders", cdc__snapshot_format="iceberg")
    create_topic(broker, orders.source.topic, 2)
    state = state_after(order_changes(80, start=at(9), seed=4))
    source = write_parquet_source(tmp_path / "src", state)
    form = {"source_kind": "parquet", "source": str(source), "snapshot_label": "base"}
    assert run_dag(f"tidemark_bootstrap_{orders.table}", at(10), form) == {"bootstrap": "success"}
    for relation in (orders.snapshot_table, f"{orders.snapshot_table} FOR VERSION AS OF 'base'"):
        assert snapshot_rows(cursor, relation) == truth(state)

    # a Delta snapshot (delta-rs writes it), registered by the bootstrap job in the metastore
    # service as a Delta table: Trino's Delta Lake connector reads it by name, its label by
    # the version the label's record names
    deltas, own = fresh_table(metastore, tmp_path, template="orders", cdc__snapshot_format="delta")
    create_topic(broker, deltas.source.topic, 2)
    monkeypatch.setenv("TIDEMARK_HIVE_METASTORE_URIS", metastore.hive_metastore_uris)
    assert run_dag(f"tidemark_bootstrap_{deltas.table}", at(10), form) == {"bootstrap": "success"}
    (base,) = SnapshotLog(own.state_location, deltas.table).records()
    cursor = trino.connect(DELTA_CATALOG).cursor()
    name = deltas.snapshot_table
    for relation in (name, f"{name} FOR VERSION AS OF {base.table_version}"):
        assert snapshot_rows(cursor, relation) == truth(state)
    cursor.execute(f'SELECT version, operation FROM "{name}$history"')
    assert [version for version, _ in cursor.fetchall()] == [base.table_version]


def snapshot_rows(cursor: Any, relation: str) -> list[Row]:
    """A snapshot's rows as Trino reads ``relation``, each key once."""
    cursor.execute(f"SELECT order_id, version, customer_id, status, amount, updated_at FROM {relation}")
    names = [d[0] for d in cursor.description]
    return keyed_once([normal(dict(zip(names, r, strict=True))) for r in cursor.fetchall()], relation)
