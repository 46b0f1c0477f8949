"""A table with ``output.table_format: iceberg``: each hour visible in one Iceberg snapshot
through the seal, a late-row amend and a rebuild; the summaries name hour, version, batches
and offsets; a retry commits nothing twice, a zombie's older version never lands; pyiceberg
DuckDB and Spark SQL read the same rows by the table's name in the catalog."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.iceberg import (
    duckdb_rows,
    fresh_snapshot_ids,
    iceberg_table,
    pyiceberg_rows,
    snapshots_of,
    spark_rows,
)
from tests.helpers.tables import AMOUNT_AT_MOST_100, at, fresh_table
from tidemark.config import load_table_file
from tidemark.errors import (
    ConfigError,
    HourCommitConflictError,
    InjectedFault,
    QualityGateError,
    SchemaEvolutionError,
)
from tidemark.evolution import SchemaHistory
from tidemark.hourcommit.base import HourNote
from tidemark.hourcommit.iceberg_commit import CatalogCommit
from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.ingest.dump import run_dump
from tidemark.observe.lineage import job_lineage
from tidemark.observe.verify import run_verify
from tidemark.seal.maintenance import maintain
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.sealing import run_release, run_seal
from tidemark.settings import Settings
from tidemark.table import Table
from tidemark.time.hours import parse_key
from tidemark_dev.duckdb_reader import duckdb_connection
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

HOUR = "2026-11-22T10"


def test_an_iceberg_table_seals_amends_and_rebuilds_each_in_one_snapshot(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, late_policy="amend", output__table_format="iceberg")
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 2)
    sent = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)]))
    run_dump(spark, config, settings, "run-1", at(11))
    produce(broker, topic, records([(0, at(11, 40)), (1, at(11, 30))], prefix="b"))
    run_dump(spark, config, settings, "run-2", at(12))
    assert HOUR in run_seal(spark, config, settings, "run-2").sealed

    expected = {(p, o): json.loads(m.value or b"{}")["event_id"] for p, o, m in sent}
    assert pyiceberg_rows(settings, table, hour="10") == expected
    assert duckdb_rows(settings, table, hour="10") == expected
    assert spark_rows(settings, table, hour="10") == expected
    (sealed,) = [s for s in snapshots_of(settings, table) if s["tidemark.hour"] == HOUR]
    assert sealed["tidemark.version"] == "1" and sealed["tidemark.run-id"] == "run-2"
    assert json.loads(sealed["tidemark.batches"]) == {"0": {"0": [0, 6], "1": [0, 6]}}
    assert sealed["tidemark.ready-time"] and "_versions/v0001-b" in sealed["tidemark.directory"]
    # the hour's first version only adds files (an amend below replaces them: an overwrite)
    assert sealed["operation"] == "append" and sealed["added-records"] == "12"
    (lineage,) = job_lineage("seal", config, settings, "run-2").outputs  # the table by its location
    assert (lineage.namespace, lineage.name) == ("file", str(Path(settings.warehouse) / table))

    # a retry of the seal's commit (a kill after it, before the journal) commits nothing again
    handle = Table.open(config, settings)
    hour = parse_key(HOUR, config.event_time.time_zone)
    directory = handle.layout.warehouse / sealed["tidemark.directory"]
    before = len(snapshots_of(settings, table))
    handle.commit.publication.publish(None, hour, [(hour.spec, directory)], HourNote("retry", {}))
    assert len(snapshots_of(settings, table)) == before

    late = produce(broker, topic, records([(0, at(10, 15)), (1, at(10, 45))], prefix="late"))
    run_dump(spark, config, settings, "run-3", at(12, 10))
    assert run_seal(spark, config, settings, "run-3").amended == [HOUR]
    after = pyiceberg_rows(settings, table, hour="10")
    (amended,) = [s for s in snapshots_of(settings, table) if s.get("tidemark.version") == "2"]
    assert amended["operation"] == "overwrite" and amended["deleted-records"] == "12"
    assert len(after) == 14 and {after[(p, o)] for p, o, _ in late} == {"late-0", "late-1"}
    assert duckdb_rows(settings, table, hour="10") == after
    amended = snapshots_of(settings, table)[-1]
    assert (amended["tidemark.hour"], amended["tidemark.version"]) == (HOUR, "2")
    assert amended["operation"] == "overwrite"  # the hour's v1 files replaced, in one snapshot

    # the zombie: v1's directory committed again after v2 is refused, nothing committed
    with pytest.raises(HourCommitConflictError, match=rf"{table} hour {HOUR}.*v2"):
        handle.commit.publication.publish(None, hour, [(hour.spec, directory)], HourNote("zombie", {}))
    assert pyiceberg_rows(settings, table, hour="10") == after

    (done,) = run_rebuild(spark, config, settings, "rebuild-1", [HOUR]).hours
    assert done["status"] == "rebuilt"
    assert pyiceberg_rows(settings, table, hour="10") == after
    assert snapshots_of(settings, table)[-1]["tidemark.version"] == "3"
    verdict = run_verify(spark, config, settings, datetime.now(UTC))  # the lake check on the snapshot
    assert verdict.ok and {c.name: c.checked for c in verdict.checks}["hour_rows"] == 1, verdict.render()


@pytest.mark.parametrize(
    "seal_point, amend_point",
    [
        ("after_registration", "after_amend_moves"),  # killed between the commit and the journal
        ("after_journal_entry", "after_amend_files"),  # after the journal; files written, no commit
    ],
)
def test_a_kill_around_the_iceberg_commit_is_recovered_by_the_retry(
    seal_point: str,
    amend_point: str,
    spark: Any,
    broker: str,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each hour in the table once, at its journal's version, committed once per version."""
    config, settings = fresh_table(settings, tmp_path, late_policy="amend", output__table_format="iceberg")
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 2)
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    produced = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)]))
    produced += produce(broker, topic, records([(0, at(11, 50)), (1, at(11, 45))], prefix="b"))
    run_dump(spark, config, settings, "run-1", at(12))
    for point, run in ((seal_point, "run-1"), (amend_point, "run-2")):
        if run == "run-2":
            produced += produce(broker, topic, records([(0, at(10, 30)), (1, at(10, 5))], prefix="late"))
            run_dump(spark, config, settings, run, at(12, 30))
        monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
        with pytest.raises(InjectedFault):
            run_seal(spark, config, settings, run)
        monkeypatch.delenv("TIDEMARK_FAIL_AT")
        run_seal(spark, config, settings, run)

    journal = Table.open(config, settings).state.journal.state()
    ten = journal.hours[HOUR]
    assert (ten.version, ten.rows) == (2, 14)
    rows = pyiceberg_rows(settings, table, hour="10")
    assert sorted(rows) == sorted((p, o) for p, o, m in produced if b"T10:" in (m.value or b""))
    commits = [(s["tidemark.hour"], s["tidemark.version"]) for s in snapshots_of(settings, table)]
    assert commits == [(HOUR, "1"), (HOUR, "2")], commits


def test_two_seals_racing_on_one_table_both_land(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two commits planned on the same snapshot: one loses Iceberg's optimistic check, is
    planned again on the winner's snapshot, and lands; neither hour is lost."""
    config, settings = fresh_table(settings, tmp_path, output__table_format="iceberg")
    create_topic(broker, config.source.topic, 1)
    produce(broker, config.source.topic, records([(0, at(10, m)) for m in (*range(0, 60, 10), 110)]))
    run_dump(spark, config, settings, "run-1", at(12))
    run_seal(spark, config, settings, "run-1")
    handle = Table.open(config, settings)
    (sealed,) = snapshots_of(settings, config.table)
    version = handle.layout.warehouse / sealed["tidemark.directory"]
    hours = [parse_key(f"2026-11-22T{h}", "UTC") for h in (20, 21)]
    copies = []
    for hour in hours:  # the sealed hour's file, as two other hours' versions
        target = handle.layout.table_dir / hour.path / "_versions" / "v0001-b0000000000"
        target.mkdir(parents=True)
        for f in version.glob("*.parquet"):
            shutil.copy(f, target / f.name)
        copies.append(target)
    barrier = threading.Barrier(2)
    commit = CatalogCommit.commit

    def planned_together(self: CatalogCommit, *args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=10)  # both planned on the same snapshot before either commits
        commit(self, *args, **kwargs)

    monkeypatch.setattr(CatalogCommit, "commit", planned_together)
    writers = [Table.open(config, settings).commit.publication for _ in hours]
    threads = [
        threading.Thread(target=w.publish, args=(None, h, [(h.spec, c)]))
        for w, h, c in zip(writers, hours, copies, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [s["tidemark.hour"] for s in snapshots_of(settings, config.table)][1:] in (
        ["2026-11-22T20", "2026-11-22T21"],
        ["2026-11-22T21", "2026-11-22T20"],
    )
    assert len(pyiceberg_rows(settings, config.table, hour="20")) == 6
    assert len(pyiceberg_rows(settings, config.table, hour="21")) == 6
    assert len(pyiceberg_rows(settings, config.table, hour="10")) == 6


def test_the_table_format_never_changes_and_iceberg_is_parquet(settings: Settings, tmp_path: Path) -> None:
    config, settings = fresh_table(settings, tmp_path)
    SchemaHistory(settings.state_location, config.table).ensure(config, "run-1")
    iceberg = config.model_copy(
        update={"output": config.output.model_copy(update={"table_format": "iceberg"})}
    )
    with pytest.raises(SchemaEvolutionError, match=r"output\.table_format: hive -> iceberg"):
        SchemaHistory(settings.state_location, config.table).check(iceberg)
    with pytest.raises(
        ConfigError,
        match=r"output\.format: orc: an Iceberg table \(output\.table_format: iceberg\) is written as Parquet",
    ):
        fresh_table(settings, tmp_path, output__table_format="iceberg", output__format="orc")


def test_a_quarantined_hour_is_in_no_snapshot_until_released(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(
        settings, tmp_path, output__table_format="iceberg", quality__expectations=AMOUNT_AT_MOST_100
    )
    create_topic(broker, config.source.topic, 1)
    bad = [(0, at(10, 5)), (0, at(10, 6)), (0, at(10, 7), {"amount": "500.00"})]
    produce(broker, config.source.topic, records([*bad, (0, at(11, 10)), (0, at(11, 20)), (0, at(12, 30))]))
    run_dump(spark, config, settings, "run-1", at(12, 40))
    with pytest.raises(QualityGateError):
        run_seal(spark, config, settings, "run-1")
    assert [s["tidemark.hour"] for s in snapshots_of(settings, config.table)] == ["2026-11-22T11"]
    assert pyiceberg_rows(settings, config.table, hour="10") == {}

    run_release(spark, config, settings, HOUR, "release-1")
    released = snapshots_of(settings, config.table)[-1]
    assert (released["tidemark.hour"], released["tidemark.version"], released["tidemark.run-id"]) == (
        HOUR,
        "1",
        "release-1",
    )
    assert len(pyiceberg_rows(settings, config.table, hour="10")) == 3


def test_maintenance_expires_old_snapshots_and_their_metadata_never_the_current(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """Three snapshots of hour 10 (seal, amend, rebuild); within the retention nothing goes;
    past it the two older snapshots and the metadata only they used go, the hour still reads
    the same, and the seal's collector then deletes the versions they held."""
    config, settings = iceberg_table(
        settings, tmp_path, broker, 1, late_policy="amend", output__version_retention="2s"
    )
    table, topic = config.table, config.source.topic
    produce(broker, topic, records([(0, at(10, m)) for m in (0, 20, 40, 110)]))
    run_dump(spark, config, settings, "run-1", at(12))
    run_seal(spark, config, settings, "run-1")
    produce(broker, topic, records([(0, at(10, 50))], prefix="late"))
    run_dump(spark, config, settings, "run-2", at(12, 10))
    run_seal(spark, config, settings, "run-2")
    run_rebuild(spark, config, settings, "rebuild-1", [HOUR])
    handle = Table.open(config, settings)
    rows = pyiceberg_rows(settings, table, hour="10")
    assert len(rows) == 4 and len(snapshots_of(settings, table)) == 3
    directories = {s["tidemark.version"]: s["tidemark.directory"] for s in snapshots_of(settings, table)}

    far = datetime(2100, 1, 1, tzinfo=UTC)  # the wall clock bounds it: only what is 2 s old
    day = config.output.model_copy(update={"version_retention": timedelta(days=1)})
    lenient = config.model_copy(update={"output": day})
    kept = maintain(Table.open(lenient, settings), far)
    assert kept.expired == [] and kept.deleted == []  # within the retention: a reader may use them

    time.sleep(2.5)
    dry = maintain(handle, far, dry_run=True)
    iceberg = open_catalog(settings).load_table(identifier(table))
    fresh = fresh_snapshot_ids(settings, table)
    # main's two older snapshots, and the fresh branch's but its head
    assert len(set(dry.expired) - fresh) == 2 and len(snapshots_of(settings, table)) == 3
    assert iceberg.metadata.refs["fresh"].snapshot_id not in dry.expired and fresh & set(dry.expired)
    done = maintain(handle, far)
    assert done.expired == dry.expired and done.deleted == dry.deleted  # what the dry run said
    assert done.deleted  # the manifest lists and manifests of the expired ones
    (current,) = snapshots_of(settings, table)
    assert current["tidemark.version"] == "3"
    assert pyiceberg_rows(settings, table, hour="10") == rows == duckdb_rows(settings, table, hour="10")
    assert not any(handle.layout.store.exists(f) for f in done.deleted)

    # the next seal's collector: v1 and v2 are in no snapshot now, and past the retention
    produce(broker, topic, records([(0, at(12, 30))], prefix="c"))
    run_dump(spark, config, settings, "run-3", at(13))
    run_seal(spark, config, settings, "run-3")
    time.sleep(2.5)
    produce(broker, topic, records([(0, at(13, 30))], prefix="d"))
    run_dump(spark, config, settings, "run-4", at(16))
    collected = run_seal(spark, config, settings, "run-4").versions_deleted
    assert any("/v0001-" in v for v in collected) and any("/v0002-" in v for v in collected), collected
    assert pyiceberg_rows(settings, table, hour="10") == rows

    # hour 10's own snapshot expires too: its version is then read from its files' directory
    time.sleep(2.5)
    maintain(handle, far)
    assert "2026-11-22T10" not in {s["tidemark.hour"] for s in snapshots_of(settings, table)}
    hour = parse_key(HOUR, "UTC")
    before = len(snapshots_of(settings, table))
    retry = handle.layout.warehouse / directories["3"]
    handle.commit.publication.publish(None, hour, [(hour.spec, retry)], HourNote("r", {}))
    assert len(snapshots_of(settings, table)) == before  # its own version: nothing committed again
    zombie = handle.layout.warehouse / directories["1"]
    with pytest.raises(HourCommitConflictError, match="already holds v3"):
        handle.commit.publication.publish(None, hour, [(hour.spec, zombie)], HourNote("z", {}))
    assert pyiceberg_rows(settings, table, hour="10") == rows


def test_data_partition_columns_a_late_side_table_and_a_new_column(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """Identity partitions by hour and ``app``; late rows in the Hive side table, the Iceberg
    hour untouched; a column added to the YAML: the next hour's files carry it, the table's
    schema and name mapping grow, older hours read it as null."""
    config, settings = fresh_table(
        settings, tmp_path, output__table_format="iceberg", partitioning__columns=["app"]
    )
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 1)
    apps = [{"app": a} for a in ("web", "ios", "web")]
    produce(
        broker,
        topic,
        records([*((0, at(10, m), a) for m, a in zip((0, 20, 40), apps, strict=True)), (0, at(11, 50))]),
    )
    run_dump(spark, config, settings, "run-1", at(12))
    run_seal(spark, config, settings, "run-1")
    by_app = duckdb_connection().sql(
        f"SELECT app, count(*) FROM iceberg_scan('{open_catalog(settings).load_table(identifier(table)).metadata_location}') "
        "WHERE hr = '10' GROUP BY app ORDER BY app"
    )
    assert by_app.fetchall() == [("ios", 1), ("web", 2)]
    spec = open_catalog(settings).load_table(identifier(table)).spec()
    assert [f.name for f in spec.fields] == ["dt", "hr", "app"]

    produce(broker, topic, records([(0, at(10, 30))], prefix="late"))
    run_dump(spark, config, settings, "run-2", at(12, 10))
    assert run_seal(spark, config, settings, "run-2").late_registered
    assert len(pyiceberg_rows(settings, table, hour="10")) == 3  # the hour as sealed
    late = spark.sql(f"SELECT event_id FROM `{config.late_table}` WHERE hr = '10'").collect()
    assert [r[0] for r in late] == ["late-0"]

    path = settings.conf_dir / f"{table}.yaml"
    data = yaml.safe_load(path.read_text())
    data["schema"]["referrer"] = "string"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    evolved = load_table_file(path)
    produce(broker, topic, records([(0, at(12, 5), {"referrer": "search"}), (0, at(13, 50))], prefix="c"))
    run_dump(spark, evolved, settings, "run-3", at(14))
    assert "2026-11-22T12" in run_seal(spark, evolved, settings, "run-3").sealed
    assert list(pyiceberg_rows(settings, table, hour="12", column="referrer").values()) == ["search"]
    assert set(pyiceberg_rows(settings, table, hour="10", column="referrer").values()) == {None}
    assert list(duckdb_rows(settings, table, hour="12", column="referrer").values()) == ["search"]


def test_an_hour_without_rows_is_sealed_in_a_snapshot_of_its_own(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """An hour with no event between two with events (the table exists) is sealed too: an
    Iceberg snapshot that adds no file but says in its summary that the hour was sealed."""
    config, settings = fresh_table(settings, tmp_path, output__table_format="iceberg")
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 1)
    produce(broker, topic, records([(0, at(10, 5)), (0, at(10, 35)), (0, at(12, 10)), (0, at(13, 50))]))
    run_dump(spark, config, settings, "run-1", at(14))
    sealed = run_seal(spark, config, settings, "run-1").sealed
    assert {"2026-11-22T10", "2026-11-22T11", "2026-11-22T12"} <= set(sealed)
    summaries = {s["tidemark.hour"]: s for s in snapshots_of(settings, table)}
    assert summaries["2026-11-22T11"]["tidemark.run-id"] == "run-1"
    assert "added-data-files" not in summaries["2026-11-22T11"]
    assert pyiceberg_rows(settings, table, hour="11") == {}
    assert len(pyiceberg_rows(settings, table, hour="10")) == 2
    assert len(pyiceberg_rows(settings, table, hour="12")) == 1
