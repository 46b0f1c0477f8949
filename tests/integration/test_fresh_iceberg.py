"""The fresh read of an Iceberg table, its branch ``fresh``: every committed batch on it as
soon as its dump commits, each record once, through seals, late rows amended in and the
snapshots' expiry; ``main`` changes only by complete hours; pyiceberg, DuckDB and Spark read
the branch by name."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.iceberg import duckdb_rows, fresh_snapshot_ids, iceberg_table, pyiceberg_rows, spark_rows
from tests.helpers.tables import at
from tidemark.fresh import iceberg_branch
from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.ingest.dump import run_dump
from tidemark.observe.status import render, table_status
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.table import Table
from tidemark_dev.generator import produce, records

pytestmark = pytest.mark.integration


def _ids(sent: list[tuple[int, int, Any]]) -> dict[tuple[int, int], str]:
    return {(p, o): json.loads(m.value or b"{}")["event_id"] for p, o, m in sent}


def _fresh_summaries(settings: Settings, table: str) -> list[dict[str, str]]:
    """The summaries of the snapshots on the fresh branch, oldest first."""
    iceberg = open_catalog(settings).load_table(identifier(table))
    head = iceberg.metadata.refs["fresh"].snapshot_id
    found: list[dict[str, str]] = []
    snapshot = iceberg.snapshot_by_id(head)
    while snapshot is not None and snapshot.summary is not None:
        summary = dict(snapshot.summary.additional_properties)
        if "tidemark.fresh-reason" not in summary:
            break
        found.append(summary)
        parent = snapshot.parent_snapshot_id
        snapshot = iceberg.snapshot_by_id(parent) if parent is not None else None
    return found[::-1]


def test_the_fresh_branch_holds_every_committed_batch_once_through_seals_and_amends(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = iceberg_table(settings, tmp_path, broker, 2, late_policy="amend")
    table, topic = config.table, config.source.topic
    sent = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 15)]))
    sent += produce(broker, topic, records([(0, at(11, 30)), (1, at(11, 50))], prefix="b"))
    run_dump(spark, config, settings, "run-1", at(12))
    assert run_seal(spark, config, settings, "seal-1").sealed == ["2026-11-22T10"]
    # the seal made the table and its branch: hour 10 sealed, hour 11's batch files beside it
    assert set(pyiceberg_rows(settings, table, hour=None)) == {k for k in _ids(sent) if k[1] < 4}
    assert pyiceberg_rows(settings, table, hour=None, branch="fresh") == _ids(sent)

    # a batch of the open hour and a late row of the sealed one: on the branch at its commit
    more = produce(broker, topic, records([(0, at(11, 20)), (1, at(10, 30))], prefix="c"))
    run_dump(spark, config, settings, "run-2", at(12, 10))
    main_before = pyiceberg_rows(settings, table, hour=None)
    assert pyiceberg_rows(settings, table, hour=None, branch="fresh") == _ids(sent + more)
    (last,) = _fresh_summaries(settings, table)[-1:]
    assert last["tidemark.fresh-reason"].startswith("dump run run-2")
    assert json.loads(last["tidemark.batches"]) == {"1": {"0": [5, 6], "1": [5, 6]}}
    status = table_status(config, settings)  # next to the sealed lag: the fresh read's
    assert status["fresh"]["through_batch"] == 1 and status["fresh"]["batches_behind"] == 0
    assert "fresh read: branch fresh through batch 1 (in step)" in render(status)

    # the seal amends hour 10: main changes by the whole hour, the branch keeps every row once
    sealed = run_seal(spark, config, settings, "seal-2")
    assert sealed.amended == ["2026-11-22T10"]
    assert len(pyiceberg_rows(settings, table, hour=None)) == len(main_before) + 1
    assert pyiceberg_rows(settings, table, hour=None, branch="fresh") == _ids(sent + more)

    # the last hour seals: the complete read and the fresh read hold the same rows
    run_dump(spark, config, settings, "run-3", at(13, 30))
    produce(broker, topic, records([(p, at(13, 10)) for p in (0, 1)], prefix="d"))
    run_dump(spark, config, settings, "run-4", at(14, 30))
    assert "2026-11-22T11" in run_seal(spark, config, settings, "seal-3").sealed
    fresh = pyiceberg_rows(settings, table, hour=None, branch="fresh")
    complete = pyiceberg_rows(settings, table, hour=None)
    assert {k: v for k, v in fresh.items() if v and not v.startswith("d-")} == _ids(sent + more)
    assert {k: v for k, v in fresh.items() if k in complete} == complete

    # DuckDB and Spark read the branch by name (its head's snapshot for DuckDB)
    assert duckdb_rows(settings, table, hour=None, branch="fresh") == fresh
    assert spark_rows(settings, table, hour=None, branch="fresh") == fresh

    # expiring every snapshot it may keeps the branch's head
    expired = Table.open(config, settings).commit.publication.maintain(datetime.now(UTC) + timedelta(hours=1))
    assert expired.expired
    assert pyiceberg_rows(settings, table, hour=None, branch="fresh") == fresh


def test_the_branch_lets_go_of_batch_files_and_snapshots_past_the_grace(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An hour's batch files stay in ``_open`` for ``output.fresh_grace`` after the branch stops
    naming them (a query planned on it a moment before still reads them), then the next seal
    deletes them; the branch's old snapshots are expired past the grace too."""
    monkeypatch.setattr(iceberg_branch, "EXPIRE_AT", 2)
    config, settings = iceberg_table(settings, tmp_path, broker, 1, output__fresh_grace="2s")
    table, topic = config.table, config.source.topic
    layout = Table.open(config, settings).layout
    produce(broker, topic, records([(0, at(10, 10)), (0, at(11, 30))]))
    run_dump(spark, config, settings, "run-1", at(12))
    run_seal(spark, config, settings, "seal-1")
    kept = list((layout.open_dir / "dt=2026-11-22/hr=10").glob("*.parquet"))
    assert kept, "hour 10's batch files went at once: a reader planned a moment ago would fail"
    for n in range(2, 5):
        produce(broker, topic, records([(0, at(11, 30 + n))], prefix=f"r{n}"))
        run_dump(spark, config, settings, f"run-{n}", at(12, n))
    time.sleep(2.5)
    produce(broker, topic, records([(0, at(11, 50))], prefix="last"))
    run_dump(spark, config, settings, "run-5", at(12, 5))
    run_seal(spark, config, settings, "seal-2")
    assert not any(p.exists() for p in kept)  # past the grace, the branch in step: deleted
    assert len(fresh_snapshot_ids(settings, table)) <= 2  # the head, and the seal's own
    assert len(pyiceberg_rows(settings, table, hour=None, branch="fresh")) == 6


def test_the_branch_carries_data_derived_partition_values_from_the_batch_files_paths(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """Batch files of a table partitioned by a column of the data hold it in their path, not in
    the file: the branch's entries carry it, so readers see it and prune by it."""
    config, settings = iceberg_table(settings, tmp_path, broker, 1, partitioning__columns=["app"])
    table, topic = config.table, config.source.topic
    sent = produce(
        broker,
        topic,
        records(
            [(0, at(10, 5), {"app": "ios"}), (0, at(10, 20), {"app": "web"}), (0, at(11, 30), {"app": "ios"})]
        ),
    )
    run_dump(spark, config, settings, "run-1", at(12))
    run_seal(spark, config, settings, "seal-1")  # hour 10 sealed, hour 11 on the branch only
    more = produce(broker, topic, records([(0, at(11, 40), {"app": "tv"})], prefix="b"))
    run_dump(spark, config, settings, "run-2", at(12, 5))
    apps = {(p, o): json.loads(m.value or b"{}")["app"] for p, o, m in sent + more}
    assert pyiceberg_rows(settings, table, hour=None, column="app", branch="fresh") == apps
    assert pyiceberg_rows(settings, table, hour="11", column="app", branch="fresh") == {
        k: v for k, v in apps.items() if k[1] >= 2
    }
    iceberg = open_catalog(settings).load_table(identifier(table))
    head = iceberg.metadata.refs["fresh"].snapshot_id
    tv = iceberg.scan(row_filter="app = 'tv'", snapshot_id=head).plan_files()
    assert [t.file.partition for t in tv] and all("tv" in str(t.file.partition) for t in tv)


def test_a_new_tables_first_seal_makes_the_table_and_branch_before_any_hour_is_due(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """The first seal run after the first batch, with no hour due, makes the table from the
    batch files (as its first sealed hour would: the same columns) and the branch with them;
    ``main`` gets its first snapshot when the hour seals."""
    config, settings = iceberg_table(settings, tmp_path, broker, 2, partitioning__columns=["app"])
    table, topic = config.table, config.source.topic
    sent = produce(broker, topic, records([(p, at(10, m), {"app": "web"}) for p in (0, 1) for m in (5, 25)]))
    run_dump(spark, config, settings, "run-1", at(10, 30))  # hour 10 still open
    assert run_seal(spark, config, settings, "seal-1").sealed == []
    assert pyiceberg_rows(settings, table, hour=None, branch="fresh") == _ids(sent)
    iceberg = open_catalog(settings).load_table(identifier(table))
    assert pyiceberg_rows(settings, table, hour=None) == {}  # main: no complete hour yet (one empty snapshot)
    made_from_batches = [(f.name, str(f.field_type)) for f in iceberg.schema().fields]
    assert "fresh read: branch fresh through batch 0 (in step)" in render(table_status(config, settings))

    # the hour seals into the same table: main holds it, the branch still every row once
    more = produce(broker, topic, records([(p, at(11, 40), {"app": "ios"}) for p in (0, 1)], prefix="b"))
    run_dump(spark, config, settings, "run-2", at(12))
    assert run_seal(spark, config, settings, "seal-2").sealed == ["2026-11-22T10"]
    assert set(pyiceberg_rows(settings, table, hour=None)) == set(_ids(sent))
    assert pyiceberg_rows(settings, table, hour=None, branch="fresh") == _ids(sent + more)
    # the columns a table made by its first sealed hour has (another table, the old way)
    other, settings = iceberg_table(settings, tmp_path, broker, 1, partitioning__columns=["app"])
    produce(
        broker, other.source.topic, records([(0, at(10, 5), {"app": "web"}), (0, at(11, 40), {"app": "ios"})])
    )
    run_dump(spark, other, settings, "run-1", at(12))
    assert run_seal(spark, other, settings, "seal-1").sealed == ["2026-11-22T10"]
    made_from_hour = [
        (f.name, str(f.field_type))
        for f in open_catalog(settings).load_table(identifier(other.table)).schema().fields
    ]
    assert made_from_batches == made_from_hour


def test_a_table_made_without_a_snapshot_gets_its_branch_from_the_next_dumps_sync(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """A seal killed between making the table for its branch and any commit leaves a table
    without a snapshot: the next sync, a dump's (which starts no JVM), gives ``main`` its
    empty first snapshot and starts the branch from it."""
    config, settings = iceberg_table(settings, tmp_path, broker, 2)
    table, topic = config.table, config.source.topic
    sent = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in (5, 25)]))
    run_dump(spark, config, settings, "run-1", at(10, 30))
    branch = iceberg_branch.IcebergFreshBranch.of(Table.open(config, settings))
    made = branch._create_table()  # what the killed seal did, and no more
    assert made is not None and made.current_snapshot() is None
    more = produce(broker, topic, records([(0, at(10, 40))], prefix="b"))
    run_dump(spark, config, settings, "run-2", at(10, 45))
    assert pyiceberg_rows(settings, table, hour=None, branch="fresh") == _ids(sent + more)
    assert pyiceberg_rows(settings, table, hour=None) == {}
