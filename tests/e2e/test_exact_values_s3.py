"""tests/integration/test_exact_values.py on the production topology's store (warehouse and
state on S3, the jobs as spark-submit runs them, pyarrow writing every file): a Parquet and
an ORC table of every column type's edge values, read back by name by Spark natively and
through Hive's SerDes (s3a, in a process of its own) and from the hour's files by pyarrow
and (Parquet) by DuckDB through its httpfs extension."""

from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
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
from tests.helpers.jobs import job_env, run_job_process
from tests.helpers.tables import at, landed
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark.tablefs import Store

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SERDE = ("spark.sql.hive.convertMetastoreParquet", "spark.sql.hive.convertMetastoreOrc")


def _job(settings: Settings, job: str, table: str, run_id: str, *extra: str) -> dict[str, Any]:
    code, out, err = run_job_process(settings, job, table, run_id, *extra)
    assert code == 0, err[-3000:]
    return dict(json.loads(out.splitlines()[-1]))


def _by_name(settings: Settings, tables: list[str]) -> list[dict[str, dict[str, Any]]]:
    """Each table's hour 10 read natively, then through the Hive SerDes: one process."""
    queries = []
    for flag in ("true", "false"):
        queries += [f"SET {key}={flag}" for key in SERDE]
        queries += [f"SELECT * FROM `{t}` WHERE dt = '2026-11-22' AND hr = '10'" for t in tables]
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.sql_read", "--pickle", *queries],
        env=job_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = [
        r
        for r, q in zip(pickle.loads(base64.b64decode(done.stdout.splitlines()[-1])), queries, strict=True)
        if q.startswith("SELECT")
    ]
    return [{row["event_id"]: row for row in rows} for rows in results]


def _files(
    settings: Settings, table: str, read: Callable[..., dict[str, dict[str, Any]]]
) -> dict[str, dict[str, Any]]:
    """The rows of hour 10's current version (its journal entry's files), as ``read`` reads them."""
    entry = HourJournal(settings.state_location, table).state().hours["2026-11-22T10"]
    return read(Store.of(settings.warehouse), list(entry.files))


def test_every_value_on_s3_is_read_exactly_or_refused(
    broker: str, settings: Settings, s3: str, tmp_path: Path
) -> None:
    lake = f"{s3}/{uuid.uuid4().hex[:10]}"
    on_s3 = replace(
        settings, warehouse=f"{lake}/warehouse", state_uri=f"{lake}/state", home=tmp_path / "home"
    )
    tables: dict[str, str] = {}
    for fmt in ("parquet", "orc"):
        config, on_s3 = edge_table(on_s3, tmp_path, fmt, broker)
        tables[fmt] = config.table
        _job(on_s3, "dump", config.table, "run-1", "--processing-time", at(12).isoformat())
        assert _job(on_s3, "seal", config.table, "seal-1")["sealed"] == ["2026-11-22T10"]
        _, dirty, reasons = landed(on_s3, config.table)
        assert set(dirty) == refused_offsets(fmt)
        assert {reasons[k] for k in dirty} == {f"unrepresentable_in_{fmt}"}

    native_parquet, native_orc, serde_parquet, serde_orc = _by_name(on_s3, [tables["parquet"], tables["orc"]])
    problems = []
    for fmt, native, serde in (("parquet", native_parquet, serde_parquet), ("orc", native_orc, serde_orc)):
        want, _ = expected(fmt)
        problems += differences(f"{fmt}: spark", native, want)
        problems += differences(f"{fmt}: spark through the Hive SerDe", serde, want)
        problems += differences(f"{fmt}: pyarrow", _files(on_s3, tables[fmt], read_hour_files), want)
    want, _ = expected("parquet")  # DuckDB reads no ORC
    problems += differences("parquet: duckdb", _files(on_s3, tables["parquet"], read_hour_files_duckdb), want)
    assert problems == []
