"""Readers of tidemark's Iceberg tables for the tests, each by the table's name in the
catalog: Spark SQL, pyiceberg, DuckDB (its iceberg extension from the PyPI wheel, on the table's current
metadata file, which it takes from the catalog) and the snapshot summaries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.tables import fresh_table
from tidemark.config import TableConfig
from tidemark.iceberg_catalog import catalog_kind, identifier, open_catalog
from tidemark.iceberg_rest import RestCatalogKind
from tidemark.settings import Settings
from tidemark_dev.duckdb_reader import attach_rest_catalog, duckdb_connection
from tidemark_dev.generator import create_topic

Rows = dict[tuple[int, int], Any]


def _table(settings: Settings, table: str) -> Any:
    return open_catalog(settings).load_table(identifier(table))


def pyiceberg_rows(
    settings: Settings, table: str, *, hour: str | None, column: str = "event_id", branch: str | None = None
) -> Rows:
    """{(MQ partition, offset): column} of an hour (``hr``; None: every hour) of the table's
    current snapshot, or of ``branch``'s head (``fresh``: the fresh read)."""
    iceberg = _table(settings, table)
    snapshot = iceberg.metadata.refs[branch].snapshot_id if branch else None
    where = f"hr = '{hour}'" if hour else "true"
    frame = iceberg.scan(row_filter=where, snapshot_id=snapshot).to_arrow()
    keys = list(zip(frame["_mq_partition"].to_pylist(), frame["_mq_offset"].to_pylist(), strict=True))
    assert len(keys) == len(set(keys)), f"a record read twice from {table} {branch or 'main'}"
    return dict(zip(keys, frame[column].to_pylist(), strict=True))


def duckdb_rows(
    settings: Settings, table: str, *, hour: str | None, column: str = "event_id", branch: str | None = None
) -> Rows:
    """The hour (None: every hour) as DuckDB reads it: by name through a REST catalog, else
    from the table's current metadata file (DuckDB reads no SQL catalog); ``branch``: its
    head's snapshot (DuckDB's ``version`` names a metadata version, not a branch)."""
    connection = duckdb_connection()
    where = f"WHERE hr = '{hour}'" if hour else ""
    if branch:
        iceberg = _table(settings, table)
        head = iceberg.metadata.refs[branch].snapshot_id
        source = f"iceberg_scan('{iceberg.metadata_location}', snapshot_from_id => {head})"
    elif isinstance(catalog_kind(settings), RestCatalogKind):
        source = f"{attach_rest_catalog(connection, settings)}.{identifier(table)}"
    else:
        source = f"iceberg_scan('{_table(settings, table).metadata_location}')"
    found = connection.sql(f"SELECT _mq_partition, _mq_offset, {column} FROM {source} {where}").fetchall()
    assert len(found) == len({(p, o) for p, o, _ in found}), f"a record read twice from {table} {branch}"
    return {(p, o): v for p, o, v in found}


SPARK_READER = """
import json, sys
from tidemark.iceberg_catalog import spark_catalog_conf
from tidemark.settings import Settings
from tidemark_dev.duckdb_reader import duckdb_connection
from tidemark.spark import build_session

settings = Settings.from_env()
spark = build_session("iceberg-reader", settings, hive=False, extra_conf=spark_catalog_conf(settings))
name, hour, column, branch = sys.argv[1:5]
source = f"{name} VERSION AS OF '{branch}'" if branch else name
where = f"WHERE hr = '{hour}'" if hour else ""
rows = spark.sql(f"SELECT _mq_partition, _mq_offset, {column} FROM {source} {where}").collect()
print(json.dumps([list(r) for r in rows]))
"""


def spark_rows(
    settings: Settings, table: str, *, hour: str | None, column: str = "event_id", branch: str = ""
) -> Rows:
    """The hour (None: every hour) read by Spark SQL by name (``iceberg.default.<table>``,
    ``VERSION AS OF '<branch>'`` with one), in a process of its own: Iceberg's runtime must
    be on the driver's class path from its start."""
    env = {
        **os.environ,
        "TIDEMARK_HOME": str(settings.home),
        "TIDEMARK_WAREHOUSE": settings.warehouse,
        **settings.iceberg_environment(),
        "TIDEMARK_ICEBERG_CATALOG_URI": settings.iceberg_catalog_url,
        "TIDEMARK_JVM_CLASS_ARCHIVE": "off",
    }
    name = f"{settings.iceberg_catalog}.{identifier(table)}"
    done = subprocess.run(
        [sys.executable, "-c", SPARK_READER, name, hour or "", column, branch],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {(p, o): v for p, o, v in json.loads(done.stdout.strip().splitlines()[-1])}


def snapshots_of(settings: Settings, table: str) -> list[dict[str, str]]:
    """The summaries of the table's ``main`` snapshots (not the fresh branch's), oldest first
    (``operation`` included)."""
    snapshots = _table(settings, table).snapshots()
    return [
        {"operation": s.summary.operation.value, **s.summary.additional_properties}
        for s in sorted(snapshots, key=lambda s: s.sequence_number or 0)
        if "tidemark.fresh-reason" not in s.summary.additional_properties
    ]


def fresh_snapshot_ids(settings: Settings, table: str) -> set[int]:
    """The ids of the fresh branch's snapshots (``tidemark.fresh``), as the table holds them now."""
    return {
        s.snapshot_id
        for s in _table(settings, table).snapshots()
        if s.summary is not None and "tidemark.fresh-reason" in s.summary.additional_properties
    }


def iceberg_table(
    settings: Settings, tmp_path: Path, broker: str, partitions: int, **overrides: Any
) -> tuple[TableConfig, Settings]:
    """A fresh events table with ``output.table_format: iceberg`` (``overrides`` as
    ``fresh_table`` takes them) and its topic of ``partitions`` MQ partitions."""
    config, settings = fresh_table(settings, tmp_path, output__table_format="iceberg", **overrides)
    create_topic(broker, config.source.topic, partitions)
    return config, settings
