"""Trino (476, from Maven Central, on the Temurin JDK 25) reads an Iceberg table tidemark
sealed, by name through its Iceberg connector on the same catalog (PostgreSQL), equal row by
row to pyiceberg's read of the same hour; the snapshot's summary is Trino's to read too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.iceberg import pyiceberg_rows
from tests.helpers.tables import at, fresh_table
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark_dev.generator import create_topic, produce, records
from tidemark_dev.net import free_port
from tidemark_dev.postgres import POSTGRES_PASSWORD, POSTGRES_USER
from tidemark_dev.trino import TrinoService

pytestmark = pytest.mark.e2e


@pytest.fixture
def on_postgres(settings: Settings, postgres: str) -> Settings:
    """The settings with the Iceberg catalog on tidemark's PostgreSQL (Trino reads no SQLite)."""
    url = (
        f"postgresql+pg8000://{POSTGRES_USER}:{POSTGRES_PASSWORD}@127.0.0.1:{settings.postgres_port}/postgres"
    )
    return replace(settings, iceberg_catalog_uri=url)


@pytest.fixture
def trino(on_postgres: Settings) -> Iterator[TrinoService]:
    service = TrinoService(on_postgres, free_port())
    service.start()
    try:
        yield service
    finally:
        service.stop()


def test_trino_reads_the_sealed_hour_by_name(
    spark: Any, broker: str, on_postgres: Settings, trino: TrinoService, tmp_path: Path
) -> None:
    config, settings = fresh_table(on_postgres, tmp_path, output__table_format="iceberg")
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 2)
    sent = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in (*range(0, 60, 10), 110)]))
    run_dump(spark, config, settings, "run-1", at(12))
    assert run_seal(spark, config, settings, "run-1").sealed == ["2026-11-22T10"]

    cursor = trino.connect().cursor()
    cursor.execute(f"SELECT _mq_partition, _mq_offset, event_id, dt, hr FROM {table} WHERE hr = '10'")
    found = cursor.fetchall()
    expected = {(p, o): json.loads(m.value or b"{}")["event_id"] for p, o, m in sent if o < 6}
    assert {(p, o): e for p, o, e, _, _ in found} == expected == pyiceberg_rows(settings, table, hour="10")
    assert {(dt, hr) for *_, dt, hr in found} == {("2026-11-22", "10")}  # from the manifests
    cursor.execute(f'SELECT summary FROM "{table}$snapshots"')
    (summary,) = (row[0] for row in cursor.fetchall())
    assert (summary["tidemark.hour"], summary["tidemark.version"]) == ("2026-11-22T10", "1")
