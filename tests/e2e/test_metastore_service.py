"""The Hive metastore as a service (the Thrift metastore of the pyspark wheel's jars on
tidemark's own PostgreSQL, `tidemark services start postgres metastore`): jobs that embedded
Derby admits one at a time run at once. A seal of one table and a rebuild of another's hour,
two spark-submit processes through the CLI at once, both register their partitions, exactly."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.metastore import metastore_service
from tests.helpers.tables import at, fresh_table
from tidemark.ingest.dump import run_dump
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark_dev.generator import create_topic, produce, records
from tidemark_dev.pgsource import psql
from tidemark_dev.postgres import METASTORE_DATABASE

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
    out = psql(settings, query, database=METASTORE_DATABASE)
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


def test_a_seal_and_a_rebuild_at_once_on_the_metastore_service(
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
    finished(cli(settings, "seal", "--table", rebuilt, "--run-id", "seal-1"))
    assert (rebuilt, "dt=2026-11-22/hr=10") in registered(settings)

    # Embedded Derby admits one of these at a time (the hive_metastore pool of one slot).
    running = [
        cli(settings, "seal", "--table", sealed, "--run-id", "seal-1"),
        cli(settings, "rebuild", "--table", rebuilt, "--hours", HOUR, "--run-id", "rebuild-1"),
    ]
    for process in running:
        finished(process)
    assert {(t, "dt=2026-11-22/hr=10") for t in tables} <= registered(settings)
    for table in tables:
        entry = HourJournal(settings.state_dir, table).state().hours[HOUR]
        assert entry.rows == 8 and entry.published
    assert HourJournal(settings.state_dir, rebuilt).state().hours[HOUR].version == 2
