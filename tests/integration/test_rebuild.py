"""Rebuilding sealed hours from the real broker with real Spark and the Derby metastore: the
same rows as before (late ones folded in under amend), a new announced version, idempotent per
run id, refused for open hours, DataLossError when the offsets are gone, one winner when two
rebuilds of an hour race."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tests.helpers.tables import at, fresh_table, registered
from tidemark.config import TableConfig
from tidemark.errors import BatchConflictError, DataLossError, InjectedFault, RebuildError
from tidemark.faults import REBUILD_POINTS
from tidemark.ingest.dump import run_dump
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.rebuild_plan import planned_hours
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark.state.locks import TableLock
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

HOUR = "2026-11-22T10"


def cycle(spark: Any, config: TableConfig, settings: Settings, run: str, processing: datetime) -> None:
    run_dump(spark, config, settings, run, processing)
    run_seal(spark, config, settings, run)


def hour_rows(spark: Any, settings: Settings, config: TableConfig) -> list[tuple[Any, ...]]:
    """Every row of hour 10 as the metastore serves it, sorted (data, lineage, partition)."""
    spark.catalog.refreshTable(config.table)
    frame = spark.sql(f"SELECT * FROM `{config.table}` WHERE dt = '2026-11-22' AND hr = '10'")
    return sorted(tuple(r) for r in frame.collect())


def file_rows(settings: Settings, config: TableConfig) -> list[tuple[Any, ...]]:
    """Every row of hour 10's files as path readers see them (schema included), sorted."""
    rows: list[tuple[Any, ...]] = []
    for path in (Layout(settings, config.table).table_dir / "dt=2026-11-22/hr=10").rglob("*.parquet"):
        rows.extend(tuple(sorted(r.items())) for r in pq.read_table(path).to_pylist())
    return sorted(rows)


def sealed_with_late(spark: Any, broker: str, settings: Settings, tmp_path: Path, policy: str) -> Any:
    """Hour 10 sealed from two MQ partitions over two batches, then two late rows."""
    config, settings = fresh_table(settings, tmp_path, late_policy=policy)
    create_topic(broker, config.source.topic, 2)
    produce(broker, config.source.topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)]))
    run_dump(spark, config, settings, "run-1", at(11))
    produce(
        broker, config.source.topic, records([(0, at(10, 55)), (0, at(11, 40)), (1, at(11, 30))], prefix="b")
    )
    cycle(spark, config, settings, "run-2", at(12))  # ready 11:20 -> hour 10 sealed
    produce(broker, config.source.topic, records([(0, at(10, 15)), (1, at(10, 45))], prefix="late"))
    cycle(spark, config, settings, "run-3", at(12, 10))
    return config, settings


def test_rebuild_under_amend_gives_the_same_rows_as_a_new_version_twice(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = sealed_with_late(spark, broker, settings, tmp_path, "amend")
    before = hour_rows(spark, settings, config)
    assert len(before) == 15  # 12 + 1 on time, 2 late folded in by amend
    files_before = file_rows(settings, config)

    result = run_rebuild(spark, config, settings, "rebuild-1", [HOUR])
    (done,) = result.hours
    assert (done["status"], done["version"], done["rows"], done["late"]) == ("rebuilt", 3, 15, 2)
    assert done["batches"] == [0, 1, 2] and done["atomic_swap"] is True
    assert hour_rows(spark, settings, config) == before
    assert file_rows(settings, config) == files_before  # same columns in the files too
    assert registered(spark, config.table) == ["dt=2026-11-22/hr=10"]

    again = run_rebuild(spark, config, settings, "rebuild-1", [HOUR])  # retry of the same run
    assert again.hours[0]["status"] == "already_rebuilt"
    second = run_rebuild(spark, config, settings, "rebuild-2", [HOUR])
    assert second.hours[0]["version"] == 4 and hour_rows(spark, settings, config) == before

    journal = list(HourJournal(settings.state_dir, config.table).entries())
    assert [(e.kind, e.version, e.rows) for e in journal][-2:] == [("rebuild", 3, 15), ("rebuild", 4, 15)]
    target = Layout(settings, config.table).table_dir / "dt=2026-11-22/hr=10"
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".parquet")) == [
        "_SUCCESS",
        "_tidemark_compacted.json",
    ]
    staging = Layout(settings, config.table).staging_root
    assert not [p for p in staging.glob("rebuild-*")], "staging left behind"

    # Later late rows still amend the rebuilt hour, once.
    produce(broker, config.source.topic, records([(1, at(10, 5))], prefix="later"))
    cycle(spark, config, settings, "run-4", at(12, 20))
    assert len(hour_rows(spark, settings, config)) == 16


def test_rebuild_under_side_table_keeps_late_rows_out(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = sealed_with_late(spark, broker, settings, tmp_path, "side_table")
    before = hour_rows(spark, settings, config)
    assert len(before) == 13
    (done,) = run_rebuild(spark, config, settings, "rebuild-1", [HOUR]).hours
    assert (done["rows"], done["late"], done["version"]) == (13, 0, 2)
    assert hour_rows(spark, settings, config) == before


def test_open_hours_are_refused_and_the_plan_task_skips_them(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = sealed_with_late(spark, broker, settings, tmp_path, "side_table")
    with pytest.raises(RebuildError, match="hour 2026-11-22T11 is not sealed yet"):
        run_rebuild(spark, config, settings, "rebuild-x", ["2026-11-22T11"])
    # The scheduled run of [11:00, 12:00) finds hour 11 open: skipped, not failed.
    skipped = planned_hours(config, settings, interval=(at(11), at(12)))
    assert skipped.skip_reason and "no sealed hour among 2026-11-22T11" in skipped.skip_reason
    ranged = planned_hours(
        config, settings, interval=(None, None), first_hour=HOUR, last_hour="2026-11-22T11"
    )
    assert ranged.skip_reason is None and ",".join(ranged.chosen) == HOUR
    dry = planned_hours(config, settings, interval=(at(10), at(11)), dry_run=True)
    assert dry.skip_reason and "dry run; would rebuild 2026-11-22T10" in dry.skip_reason


def test_offsets_gone_from_the_broker_fail_with_data_loss_and_leave_the_hour(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient

    config, settings = sealed_with_late(spark, broker, settings, tmp_path, "side_table")
    before = hour_rows(spark, settings, config)
    admin = AdminClient({"bootstrap.servers": broker})
    for future in admin.delete_topics([config.source.topic]).values():
        future.result()
    create_topic(broker, config.source.topic, 2)  # same name, offsets start again at 0
    with pytest.raises(
        DataLossError, match=rf"{config.source.topic}\[0\]: offsets 0\.\.5 .*hour 2026-11-22T10"
    ):
        run_rebuild(spark, config, settings, "rebuild-1", [HOUR])
    assert hour_rows(spark, settings, config) == before
    kinds = [e.kind for e in HourJournal(settings.state_dir, config.table).entries()]
    assert "rebuild" not in kinds


def test_two_rebuilds_of_one_hour_at_once_one_wins_data_exact(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = sealed_with_late(spark, broker, settings, tmp_path, "amend")
    before = hour_rows(spark, settings, config)
    outcomes: dict[str, Any] = {}

    def rebuild(run: str) -> None:
        try:
            outcomes[run] = run_rebuild(spark, config, settings, run, [HOUR]).hours[0]["status"]
        except BatchConflictError as exc:
            outcomes[run] = exc

    lock = TableLock(settings.state_dir, config.table, f"rebuild-{HOUR}")
    first = threading.Thread(target=rebuild, args=("rebuild-1",))
    first.start()
    deadline = time.monotonic() + 60
    while lock.holder() is None and first.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lock.holder() is not None, "the first rebuild never took the hour lock"
    rebuild("rebuild-2")  # while the first one holds it
    first.join()
    assert outcomes["rebuild-1"] == "rebuilt"
    loser = outcomes["rebuild-2"]
    assert isinstance(loser, BatchConflictError), loser
    assert f"another job holds the rebuild-{HOUR} lock" in str(loser) and "run rebuild-1" in str(loser)
    assert hour_rows(spark, settings, config) == before
    assert lock.holder() is None


def test_a_rebuild_killed_at_any_point_is_finished_by_its_retry(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, settings = sealed_with_late(spark, broker, settings, tmp_path, "amend")
    before = hour_rows(spark, settings, config)
    journal = HourJournal(settings.state_dir, config.table)
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    for point in REBUILD_POINTS:
        run = f"rebuild-{point}"
        monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
        with pytest.raises(InjectedFault):
            run_rebuild(spark, config, settings, run, [HOUR])
        monkeypatch.delenv("TIDEMARK_FAIL_AT")
        # Between the swap and the journal entry readers already see the new files: same rows.
        assert hour_rows(spark, settings, config) == before
        (done,) = run_rebuild(spark, config, settings, run, [HOUR]).hours
        assert done["status"] == "rebuilt" and done["rows"] == 15
        assert hour_rows(spark, settings, config) == before
    entries = [e for e in journal.entries() if e.kind == "rebuild"]
    assert [(e.run_id, e.version) for e in entries] == [
        (f"rebuild-{p}", v) for p, v in zip(REBUILD_POINTS, (3, 4, 5), strict=True)
    ]
    assert not list(Layout(settings, config.table).staging_root.glob("rebuild-*"))
