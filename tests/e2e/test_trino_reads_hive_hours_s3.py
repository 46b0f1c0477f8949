"""Trino (476, its Hive connector on the metastore service, its native S3 client) reads the
sealed hours of a warehouse on S3 by name: the edge values of tests/helpers/exact.py in a
Parquet and an ORC table, dumped and sealed by the jobs as spark-submit runs them, each
value equal or its record refused at classification, as Spark, pyarrow and DuckDB read them
(tests/e2e/test_exact_values_s3.py). Their fresh reads, ``<table>_fresh``, hold the same sealed
hour (where the table's partition points) and the open hour's committed record (a mirror of
server-side copies), which the table does not. Local hours Trino's Hive connector cannot read: its local
file system serves ``local://`` only (``tidemark_dev.trino.hive_catalog``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.exact import SCHEMA, differences, edge_table, expected
from tests.helpers.jobs import run_job_process
from tests.helpers.s3cluster import lake, s3_metastore
from tests.helpers.tables import at
from tidemark.settings import Settings
from tidemark_dev.net import free_port
from tidemark_dev.trino import HIVE_CATALOG, TrinoService

pytestmark = pytest.mark.e2e
__all__ = ["lake", "s3_metastore"]  # module-scoped fixtures of this module's test


@pytest.fixture
def trino(s3_metastore: Settings) -> Iterator[TrinoService]:
    service = TrinoService(s3_metastore, free_port())
    service.start()
    try:
        yield service
    finally:
        service.stop()


def test_trino_reads_every_edge_value_of_hive_hours_on_s3_exactly(
    broker: str, s3_metastore: Settings, trino: TrinoService, tmp_path: Path
) -> None:
    tables = {}
    for fmt in ("parquet", "orc"):
        config, own = edge_table(s3_metastore, tmp_path, fmt, broker)
        for job, extra in (("dump", ["--processing-time", at(12).isoformat()]), ("seal", [])):
            code, out, err = run_job_process(own, job, config.table, "run-1", *extra)
            assert code == 0, f"{job} of the {fmt} table: {err[-3000:]}"
        assert json.loads(out.splitlines()[-1])["sealed"] == ["2026-11-22T10"]
        tables[fmt] = config.table
    cursor = trino.connect(HIVE_CATALOG).cursor()
    problems = []
    for fmt, table in tables.items():
        want, _ = expected(fmt)
        problems += differences(f"trino {fmt}", trino_rows(cursor, table), want)
        problems += differences(f"trino {fmt} fresh", trino_rows(cursor, f"{table}_fresh"), want)
        # hour 11 is open: its committed record (the one that closed hour 10) is fresh only
        for name, ids in ((table, []), (f"{table}_fresh", [["closing"]])):
            cursor.execute(f"SELECT event_id FROM {name} WHERE dt = '2026-11-22' AND hr = '11'")
            assert cursor.fetchall() == ids, name
    assert problems == []


def trino_rows(cursor: Any, table: str) -> dict[str, dict[str, Any]]:
    """Hour 10 of ``table`` as Trino reads it, by event id. A ``real`` is widened to ``double``
    in Trino (exact): its client protocol sends a real as the shortest decimal text of the
    float32, which Python parses as a different double (3.4028235e38 for FLT_MAX)."""
    columns = ", ".join("CAST(f AS double) AS f" if name == "f" else name for name in SCHEMA)
    cursor.execute(f"SELECT {columns} FROM {table} WHERE dt = '2026-11-22' AND hr = '10'")
    names = [d[0] for d in cursor.description]
    rows = {}
    for values in cursor.fetchall():
        row = {name: _plain(value) for name, value in zip(names, values, strict=True)}
        rows[row["event_id"]] = row
    return rows


def _plain(value: Any) -> Any:
    """Trino's client types as the comparison's: a row as a dict of its fields."""
    if isinstance(value, tuple) and hasattr(value, "_names"):
        return {name: _plain(v) for name, v in zip(value._names, value, strict=True)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
