"""An Iceberg table on the production topology's store (warehouse and state on S3), with the
jobs as spark-submit runs them: the seal writes the hour's version through pyarrow in the
tasks and commits it with pyiceberg's S3 FileIO (a kill after the commit: the retry commits
nothing twice); an amend replaces it in a second snapshot.
Spark SQL (Iceberg over s3a), pyiceberg and DuckDB (httpfs) read the same rows by name. Once
in the SQL catalog, once in Iceberg's own REST catalog (its secret kept off the jobs' command
lines), once in Nessie's (a maintained REST catalog from Maven Central)."""

from __future__ import annotations

import contextlib
import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.iceberg import duckdb_rows, pyiceberg_rows, snapshots_of, spark_rows
from tests.helpers.iceberg_rest import rest_catalog
from tests.helpers.jobs import run_job_process
from tests.helpers.tables import at, fresh_table
from tidemark.faults import EXIT_CODE
from tidemark.settings import Settings
from tidemark_dev.generator import create_topic, produce, records
from tidemark_dev.nessie import NessieService
from tidemark_dev.net import free_port_block

pytestmark = pytest.mark.e2e


def run(settings: Settings, job: str, table: str, run_id: str, *extra: str) -> dict[str, Any]:
    code, out, err = run_job_process(settings, job, table, run_id, *extra)
    assert code == 0, err[-3000:]
    return dict(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize("catalog", ["sql", "rest", "nessie"])
def test_an_iceberg_table_on_s3_seals_and_amends_and_every_engine_reads_it(
    catalog: str, broker: str, settings: Settings, s3: str, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, late_policy="amend", output__table_format="iceberg")
    lake = f"{s3}/{uuid.uuid4().hex[:10]}"
    settings = replace(
        settings, warehouse=f"{lake}/warehouse", state_uri=f"{lake}/state", home=tmp_path / "home"
    )
    with contextlib.ExitStack() as stack:
        if catalog == "rest":  # the REST catalog writes the metadata through its own s3a
            settings = stack.enter_context(rest_catalog(settings, tmp_path / "rest"))[1]
        if catalog == "nessie":  # a REST catalog tidemark did not write, its metadata its own
            nessie = NessieService(settings, free_port_block(2))
            nessie.start()
            stack.callback(nessie.stop)
            settings = replace(settings, iceberg_catalog_uri=nessie.catalog_uri, iceberg_catalog="nessie")
        seal_amend_and_read(broker, config, settings, history=catalog != "nessie")


def seal_amend_and_read(broker: str, config: Any, settings: Settings, *, history: bool) -> None:
    """``history``: the table's metadata keeps its older snapshots (Nessie's keeps the current
    one only: a table's history is Nessie's commit log, and a step's retry and zombie checks
    read an hour's version from its files' directory, as after an expiry)."""
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 2)
    sent = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)]))
    sent += produce(broker, topic, records([(0, at(11, 40)), (1, at(11, 30))], prefix="b"))
    run(settings, "dump", table, "run-1", "--processing-time", at(12).isoformat())
    # the seal killed (os._exit) after its Iceberg commit, before its journal entry: the retry
    # finds its own commit in the summaries and commits nothing again
    code, _, err = run_job_process(settings, "seal", table, "seal-1", fail_at="after_registration")
    assert code == EXIT_CODE, err[-3000:]
    assert len(snapshots_of(settings, table)) == 1
    assert run(settings, "seal", table, "seal-1")["sealed"] == ["2026-11-22T10"]
    on_time = {(p, o): json.loads(m.value or b"{}")["event_id"] for p, o, m in sent if o < 6}
    assert pyiceberg_rows(settings, table, hour="10") == on_time

    late = produce(broker, topic, records([(0, at(10, 15)), (1, at(10, 45))], prefix="late"))
    run(settings, "dump", table, "run-2", "--processing-time", at(12, 10).isoformat())
    assert run(settings, "seal", table, "seal-2")["amended"] == ["2026-11-22T10"]
    # by each message's own id: delivery reports of two partitions may come back in either order
    amended = {**on_time, **{(p, o): json.loads(m.value or b"{}")["event_id"] for p, o, m in late}}
    assert pyiceberg_rows(settings, table, hour="10") == amended
    assert duckdb_rows(settings, table, hour="10") == amended
    assert spark_rows(settings, table, hour="10") == amended
    summaries = snapshots_of(settings, table)
    versions = [(s["tidemark.hour"], s["tidemark.version"]) for s in summaries]
    assert versions == [("2026-11-22T10", "1"), ("2026-11-22T10", "2")][0 if history else 1 :]
    assert all(
        s["tidemark.directory"].startswith(f"{table}/dt=2026-11-22/hr=10/_versions/") for s in summaries
    )
