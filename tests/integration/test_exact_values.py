"""What tidemark writes, every documented reader reads exactly (docs/operations.md, "Who reads
what"): every column type with its edge values (tests/helpers/exact.py) goes through the dump
and the seal (pyarrow writes the hour) and a rebuild (Spark writes it), in Parquet and in ORC
on the local disk, and is read back by Spark's native readers, by Spark through Hive's SerDes,
by pyarrow and (Parquet: DuckDB has no ORC reader) by DuckDB. Every value is equal, or its record was refused at classification as
``unrepresentable_in_<format>`` (``ingest/exact.py``). On S3: tests/e2e/test_exact_values_s3.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.exact import (
    differences,
    edge_table,
    expected,
    read_hour_files,
    read_hour_files_duckdb,
    refused_offsets,
)
from tests.helpers.tables import at, landed
from tidemark.ingest.dump import run_dump
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.tablefs import Store

pytestmark = pytest.mark.integration

HOUR_10 = "dt = '2026-11-22' AND hr = '10'"


def _spark_rows(spark: Any, table: str, *, hive_serde: bool) -> dict[str, dict[str, Any]]:
    flag = "false" if hive_serde else "true"
    spark.conf.set("spark.sql.hive.convertMetastoreParquet", flag)
    spark.conf.set("spark.sql.hive.convertMetastoreOrc", flag)
    try:
        spark.catalog.refreshTable(table)
        frame = spark.sql(f"SELECT * FROM `{table}` WHERE {HOUR_10}")
        return {r["event_id"]: r.asDict(recursive=True) for r in frame.collect()}
    finally:
        spark.conf.unset("spark.sql.hive.convertMetastoreParquet")
        spark.conf.unset("spark.sql.hive.convertMetastoreOrc")


def _hour_files(spark: Any, table: str) -> tuple[Store, list[str]]:
    """The store of hour 10's registered location and its visible files."""
    described = spark.sql(f"DESCRIBE FORMATTED `{table}` PARTITION (dt='2026-11-22', hr='10')").collect()
    store = Store.of(next(r[1] for r in described if r[0] == "Location"))
    files = [f for f in store.all_files("") if not f.rsplit("/", 1)[-1].startswith(("_", "."))]
    assert files, f"{table}: no visible file in the hour"
    return store, files


def _read_everywhere(spark: Any, table: str, want: dict[str, dict[str, Any]]) -> list[str]:
    store, files = _hour_files(spark, table)
    parquet = not files[0].endswith(".orc")
    return [
        *differences("spark", _spark_rows(spark, table, hive_serde=False), want),
        *differences("spark through the Hive SerDe", _spark_rows(spark, table, hive_serde=True), want),
        *differences("pyarrow", read_hour_files(store, files), want),
        *(differences("duckdb", read_hour_files_duckdb(store, files), want) if parquet else []),
    ]


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
def test_every_value_is_read_exactly_or_refused(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, fmt: str
) -> None:
    config, settings = edge_table(settings, tmp_path, fmt, broker)
    table = config.table
    run_dump(spark, config, settings, "run-1", at(12))
    assert "2026-11-22T10" in run_seal(spark, config, settings, "run-1").sealed

    want, _ = expected(fmt)
    _, dirty, reasons = landed(settings, table)
    assert set(dirty) == refused_offsets(fmt)
    assert {reasons[k] for k in dirty} == {f"unrepresentable_in_{fmt}"}
    assert _read_everywhere(spark, table, want) == [], "the seal's hour (pyarrow's writer)"

    (done,) = run_rebuild(spark, config, settings, "rebuild-1", ["2026-11-22T10"]).hours
    assert done["status"] == "rebuilt"
    assert _read_everywhere(spark, table, want) == [], "the rebuilt hour (Spark's writer)"
