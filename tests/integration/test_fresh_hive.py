"""The fresh read of a Hive table, ``<table>_fresh`` in the metastore service (the real Hive
2.3 Thrift metastore on PostgreSQL): every committed batch readable by name as soon as its dump
commits, each record once, through seals and late rows amended in; a sealed hour's partition
points where ``T``'s does, an open one at a mirror of committed files only; the mirrors a
partition left are deleted after the grace; a seal deletes batch files at once.

The table ``T`` is made here as Hive makes one, so that the jobs, run in this process with a
session that must never start, register over Thrift as a seal process of this deployment does
(tests/e2e/test_fresh_reads.py runs the jobs as processes)."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fresh import hive_fresh_rows, hive_locations
from tests.helpers.jobs import jvm_free_session
from tests.helpers.metastore import hive_made_table, metastore_service
from tests.helpers.tables import at, fresh_table
from tidemark.config import TableConfig
from tidemark.fresh import fresh_read
from tidemark.ingest.dump import run_dump
from tidemark.metastore_service import DATABASE, MetastoreConnection
from tidemark.observe.report import render_report, report_data
from tidemark.observe.status import render, table_status
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.table import Table
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def service(settings: Settings, postgres: str) -> Iterator[Settings]:
    with metastore_service(settings) as own:
        yield own


def _table(
    service: Settings, tmp_path: Path, broker: str, *, made: bool = True, **overrides: Any
) -> tuple[TableConfig, Settings]:
    """A table and its topic; ``made``: the table made in the service as Hive makes one."""
    config, own = fresh_table(service, tmp_path, late_policy="amend", **overrides)
    create_topic(broker, config.source.topic, 2)
    if made:
        connection = MetastoreConnection(own.hive_metastore_uris, config.table)
        hive_made_table(connection, config, config.table, f"file:{own.warehouse}/{config.table}")
        connection.close()
    return config, own


def _keys(sent: list[tuple[int, int, Any]]) -> Counter[tuple[int, int]]:
    return Counter((p, o) for p, o, _ in sent)


def _read(settings: Settings, table: str) -> Counter[tuple[int, int]]:
    rows = hive_fresh_rows(settings, table)
    assert rows is not None, "no fresh table"
    return Counter((int(p), int(o)) for p, o in rows)


def _registered(settings: Settings, name: str) -> dict[tuple[str, ...], str]:
    """The Hive table ``name``'s partitions and where each points (the metastore qualifies a
    local path it adds with ``file:``, not one it moves a partition to: both are read alike)."""
    located = hive_locations(settings, name)
    assert located is not None, f"no table {name}"
    return {key: location.removeprefix("file:") for key, location in located.items()}


def _fresh_located(settings: Settings, table: str) -> dict[tuple[str, ...], str]:
    return _registered(settings, f"{table}_fresh")


def test_the_fresh_table_holds_every_committed_batch_once_through_seals_and_amends(
    spark: Any, broker: str, service: Settings, tmp_path: Path
) -> None:
    config, own = _table(service, tmp_path, broker, output__fresh_grace="0s")
    table, topic = config.table, config.source.topic
    session = jvm_free_session(metastore_uris=own.hive_metastore_uris)
    hour_10 = ("2026-11-22", "10")
    hour_11 = ("2026-11-22", "11")

    sent = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 15)]))
    sent += produce(broker, topic, records([(0, at(11, 30)), (1, at(11, 50))], prefix="b"))
    run_dump(session, config, own, "run-1", at(12))
    # the dump made the fresh table (a copy of T's definition) and its open hours' mirrors
    assert _read(own, table) == _keys(sent)
    located = _fresh_located(own, table)
    assert set(located) == {hour_10, hour_11}
    assert all(f"/{table}__fresh/" in loc for loc in located.values()), located

    # an attempt's file that never committed, beside the committed ones: never in a mirror
    open_10 = Path(own.warehouse) / table / "_open" / "dt=2026-11-22" / "hr=10"
    committed = sorted(open_10.glob("*.parquet"))
    attempt = open_10 / committed[0].name.replace("b000000", "b000001")
    assert attempt != committed[0]
    shutil.copy(committed[0], attempt)
    fresh = fresh_read(Table.open(config, own))
    assert fresh is not None and fresh.sync("test") is not None
    assert _read(own, table) == _keys(sent)
    attempt.unlink()

    # hour 10 seals: its partition points where T's does, in one move; its batch files go at once
    assert run_seal(session, config, own, "seal-1").sealed == ["2026-11-22T10"]
    located = _fresh_located(own, table)
    assert located[hour_10] == _registered(own, table)[hour_10]
    assert f"/{table}__fresh/" in located[hour_11]
    assert not list(open_10.glob("*.parquet")), "the sealed hour's batch files stay"
    assert _read(own, table) == _keys(sent)

    # a late row of hour 10 and a batch of hour 11: hour 10 reads its sealed files and the late
    # one from a mirror until the next seal amends it in
    more = produce(broker, topic, records([(0, at(11, 20)), (1, at(10, 30))], prefix="c"))
    sent += more
    run_dump(session, config, own, "run-2", at(12, 10))
    located = _fresh_located(own, table)
    assert f"/{table}__fresh/" in located[hour_10]
    assert _read(own, table) == _keys(sent)
    status = render(table_status(config, own))
    assert f"fresh read: table {table}_fresh through batch 1 (in step)" in status, status
    page = render_report(report_data(config, own))  # the health page, beside "sealed through"
    assert f"fresh read: table {table}_fresh through batch 1 (in step)" in page

    # the next seal amends hour 10: back to T's location, every row once (an amend reads the
    # late rows with Spark: this process's session, whose Hive client is its own Derby, so
    # this seal registers there; the hour's directory, where T's partition points, stays)
    assert run_seal(spark, config, own, "seal-2").amended == ["2026-11-22T10"]
    located = _fresh_located(own, table)
    assert located[hour_10] == _registered(own, table)[hour_10]
    assert _read(own, table) == _keys(sent)

    # the last hour seals: the complete read and the fresh read are the same
    run_dump(session, config, own, "run-3", at(13, 30))
    last = produce(broker, topic, records([(p, at(13, 10)) for p in (0, 1)], prefix="d"))
    run_dump(session, config, own, "run-4", at(14, 30))
    assert "2026-11-22T11" in run_seal(session, config, own, "seal-3").sealed
    assert _read(own, table) == _keys(sent + last)
    located = _fresh_located(own, table)
    registered = _registered(own, table)
    assert {k: v for k, v in located.items() if k in registered} == registered

    # the mirrors no partition points at now are marked, then deleted past the grace (0 s)
    mirrors = Path(own.warehouse) / f"{table}__fresh"
    assert any(mirrors.rglob("_retired.json"))
    assert fresh.sync("test: sweep") is not None
    kept = {Path(v) for v in located.values()}
    left = {p.parent for p in mirrors.rglob("*.parquet")}
    assert left <= kept, left - kept  # only the open hour 13's mirror
    connection = MetastoreConnection(own.hive_metastore_uris, table)
    shape = connection.table(f"{table}_fresh")
    connection.close()
    assert shape is not None  # what it reflects, for readers (SHOW TBLPROPERTIES)
    params = shape.parameters
    assert params["tidemark.fresh-through-batch"] == "3" and params["tidemark.fresh-reason"] == "test: sweep"


def test_a_table_of_the_fresh_name_that_tidemark_did_not_make_is_left_alone(
    broker: str, service: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, own = _table(service, tmp_path, broker)
    table = config.table
    connection = MetastoreConnection(own.hive_metastore_uris, table)
    hive_made_table(connection, config, f"{table}_fresh", f"file:{tmp_path}/theirs")
    before = connection.table(f"{table}_fresh")
    sent = produce(broker, config.source.topic, records([(0, at(10, 5)), (1, at(10, 35))]))
    done = run_dump(jvm_free_session(), config, own, "run-1", at(12))
    assert done.status == "committed" and done.rows == len(sent)  # the batch commits all the same
    assert f"{DATABASE}.{table}_fresh exists and is not tidemark's fresh read of {table}" in caplog.text
    assert connection.table(f"{table}_fresh") == before and connection.partitions(f"{table}_fresh") == []
    connection.close()
    status = render(table_status(config, own))
    assert f"fresh read: table {table}_fresh, not readable now: FreshTableConflict" in status, status


def test_a_new_tables_first_batch_is_fresh_before_its_first_seal_makes_the_table(
    broker: str, service: Settings, tmp_path: Path
) -> None:
    config, own = _table(service, tmp_path, broker, made=False)
    table = config.table
    status = render(table_status(config, own))
    assert f"fresh read: table {table}_fresh, none yet" in status, status
    sent = produce(broker, config.source.topic, records([(0, at(10, 5)), (1, at(10, 35))]))
    run_dump(jvm_free_session(), config, own, "run-1", at(10, 40))
    assert _read(own, table) == _keys(sent)  # readable by name, the table itself not made yet
    connection = MetastoreConnection(own.hive_metastore_uris, table)
    assert connection.table(table) is None
    connection.close()
    assert f"fresh read: table {table}_fresh through batch 0 (in step)" in render(table_status(config, own))
