"""Retention on the real broker, real Spark and the Derby metastore (``tidemark.retention``):
exactly the hours past ``retention.hours`` are dropped (never an open one), each drop is in
the journal and the audit log, the metastore loses their partitions and, after the grace, the
store their files; a kill at each of its steps (in-process, TIDEMARK_FAIL_MODE=raise) is
repaired by the retry; a late record of a dropped hour never brings it back; the lake check
passes throughout."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.iceberg import pyiceberg_rows, snapshots_of
from tests.helpers.tables import at, fresh_table, registered
from tidemark.errors import InjectedFault, RebuildError
from tidemark.ingest.dump import run_dump
from tidemark.observe.report import render_report, report_data
from tidemark.observe.status import explain_hour, table_status
from tidemark.observe.verify import run_verify
from tidemark.retention import RetentionResult, run_retention
from tidemark.seal.maintenance import maintain
from tidemark.seal.rebuild_plan import plan_rebuild
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.audit import AuditLog
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark.table import Table
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

HOURS = ["2026-11-22T10", "2026-11-22T11", "2026-11-22T12", "2026-11-22T13", "2026-11-22T14"]


def partitions(hours: list[str]) -> list[str]:
    return [f"dt=2026-11-22/hr={h[-2:]}" for h in hours]


def test_retention_drops_exactly_the_hours_past_it_and_survives_a_kill_at_each_step(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, settings = fresh_table(settings, tmp_path, late_policy="amend", retention__hours="3h")
    create_topic(broker, config.source.topic, 2)
    produce(
        broker,
        config.source.topic,
        records([(p, at(h, m)) for p in (0, 1) for h in range(10, 15) for m in (5, 35)]),
    )
    produce(broker, config.source.topic, records([(0, at(15, 40)), (1, at(15, 40))], prefix="wm"))
    run_dump(spark, config, settings, "run-1", at(15, 50))
    run_seal(spark, config, settings, "run-1")
    journal, layout = HourJournal(settings.state_dir, config.table), Layout(settings, config.table)
    assert sorted(journal.state().hours) == HOURS and journal.state().sealed_through == at(15).isoformat()
    rows_before = {key: entry.rows for key, entry in journal.state().hours.items()}

    def retention(run: str, as_of: datetime, point: str | None = None, cfg: Any = config) -> RetentionResult:
        """One run; with ``point``, it is killed there once and the same run id retried."""
        if point is None:
            return run_retention(spark, cfg, settings, run, as_of)
        monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
        monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
        with pytest.raises(InjectedFault):
            run_retention(spark, cfg, settings, run, as_of)
        monkeypatch.delenv("TIDEMARK_FAIL_AT")
        return run_retention(spark, cfg, settings, run, as_of)

    def hour_files(key: str) -> list[str]:
        return layout.store.all_files(layout.relative(layout.table_dir / partitions([key])[0]))

    # A dry run changes nothing.
    dry = run_retention(spark, config, settings, "dry", at(14), dry_run=True)
    assert dry.dropped == HOURS[:1] and journal.state().kept_from is None
    assert registered(spark, config.table) == partitions(HOURS)

    # As of 14:00 with 3 h kept: hour 10 (ended 11:00) goes; killed after its journal entry.
    first = retention("maintain-1", at(14), "after_retention_entry")
    assert first.first_kept == HOURS[1] and first.dropped == []  # the killed try recorded the drop
    assert sorted(journal.state().hours) == HOURS[1:] and journal.state().dropped == 1
    assert registered(spark, config.table) == partitions(HOURS[1:])
    assert hour_files(HOURS[0]), "deleted before the grace (output.version_retention) passed"

    # As of 16:00: hours 11 and 12 go; killed with one of their partitions unregistered.
    second = retention("maintain-2", at(16), "mid_retention_unregister")
    assert second.first_kept == HOURS[3] and second.unregistered == partitions(HOURS[2:3])
    assert registered(spark, config.table) == partitions(HOURS[3:])
    assert {h: e.rows for h, e in journal.state().hours.items()} == {h: rows_before[h] for h in HOURS[3:]}
    drops = [r for r in AuditLog(settings.state_dir, config.table).records() if r.action == "retention"]
    assert [(r.detail["first_kept"], r.detail["hours"]) for r in drops] == [
        (HOURS[1], f"{HOURS[0]} .. {HOURS[0]}"),
        (HOURS[3], f"{HOURS[1]} .. {HOURS[2]}"),
    ]
    run_verify(spark, config, settings, datetime.now(UTC))  # files in their grace are no orphans

    # A late record of dropped hour 10 and one of kept hour 13: only 13 is amended.
    produce(broker, config.source.topic, records([(0, at(10, 50)), (1, at(13, 50))], prefix="late"))
    run_dump(spark, config, settings, "run-2", at(16, 10))
    run_seal(spark, config, settings, "run-2")
    state = journal.state()
    assert HOURS[0] not in state.hours and state.hours[HOURS[3]].rows == rows_before[HOURS[3]] + 1
    assert registered(spark, config.table) == partitions(HOURS[3:])
    with pytest.raises(RebuildError, match="dropped by retention"):
        plan_rebuild(config, settings, HOURS[1])
    assert explain_hour(config, settings, HOURS[0])["state"] == "dropped"

    # The grace passed (none here): the dropped hours' files go; killed before the pointer.
    no_grace = config.model_copy(
        update={"output": config.output.model_copy(update={"version_retention": timedelta(0)})}
    )
    third = retention("maintain-3", at(16), "before_retention_pointer", no_grace)
    assert all(hour_files(key) == [] for key in HOURS[:3])
    assert third.dropped == [] and all(hour_files(key) for key in HOURS[3:])
    late_dir = layout.store.all_files(layout.relative(layout.late_dir))
    assert not [f for f in late_dir if "hr=10" in f], late_dir  # the dropped hour's late row went too
    run_verify(spark, config, settings, datetime.now(UTC))
    status = table_status(config, settings)
    assert (status["oldest_hour_kept"], status["hours_dropped_by_retention"]) == (HOURS[3], 3)
    page = render_report(report_data(config, settings))  # the health page says so too
    assert f"oldest hour kept <b>{HOURS[3]}</b>, dropped by retention 3 hours" in page
    assert (
        "(run maintain-3): bytes deleted" in page
        and "first hour kept 2026-11-22T13, hours dropped now 0" in page
    )
    assert "problems 0, verdict PASS" in page  # the last lake check, on the page
    assert retention("maintain-4", at(16)).files_deleted == 0  # nothing left to do


def test_an_iceberg_table_drops_old_hours_in_one_snapshot_and_their_files_once_unreferenced(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """One delete snapshot takes the hours away (whole files: no row rewritten); their version
    directories stay while an older snapshot still references them (time travel), and go with
    the next run after the maintenance DAG's expiry."""
    config, settings = fresh_table(
        settings,
        tmp_path,
        output__table_format="iceberg",
        retention__hours="3h",
        output__version_retention="0s",
    )
    table = config.table
    create_topic(broker, config.source.topic, 2)
    produce(broker, table, records([(p, at(h, m)) for p in (0, 1) for h in range(10, 15) for m in (5, 35)]))
    produce(broker, table, records([(0, at(15, 40)), (1, at(15, 40))], prefix="wm"))
    run_dump(spark, config, settings, "run-1", at(15, 50))
    run_seal(spark, config, settings, "run-1")
    layout = Layout(settings, table)

    first = run_retention(spark, config, settings, "maintain-1", at(16))
    assert first.dropped == HOURS[:3] and first.unregistered == partitions(HOURS[:3])
    assert [len(pyiceberg_rows(settings, table, hour=h[-2:])) for h in HOURS] == [0, 0, 0, 4, 4]
    last = snapshots_of(settings, table)[-1]
    assert last["operation"] == "delete" and last["tidemark.retention"] == f"hours before {HOURS[3]}"
    assert first.waiting == HOURS[:3] and (layout.table_dir / partitions(HOURS[:1])[0]).exists()

    maintain(Table.open(config, settings), datetime.now(UTC))  # expires every snapshot but the current
    second = run_retention(spark, config, settings, "maintain-2", at(16))
    assert second.files_deleted > 0 and second.waiting == [] and second.unregistered == []
    assert not any((layout.table_dir / p).exists() for p in partitions(HOURS[:3]))
    assert len(snapshots_of(settings, table)) == 1  # the retry committed nothing
    run_verify(spark, config, settings, datetime.now(UTC))


def test_dirty_records_and_the_late_table_are_dropped_past_their_own_retention_through_kills(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``retention.dirty`` drops the dirty records of batches committed before its horizon
    (then a rebuild of an hour those batches fed refuses by name), ``retention.late`` the
    late side table's older hours (never registered again, even by a later late row); each
    killed after its horizon is recorded and retried; the hours themselves stay."""
    config, settings = fresh_table(
        settings,
        tmp_path,
        late_policy="side_table",
        dirty__max_dirty_ratio=0.5,
        retention__dirty="3h",
        retention__late="3h",
    )
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 2)
    bad = {"user_id": "not a number"}
    layout, audit = Layout(settings, table), AuditLog(settings.state_dir, table)

    def batch(run: str, processing: datetime, items: list[tuple[Any, ...]]) -> None:
        produce(broker, topic, records(items, prefix=run))
        run_dump(spark, config, settings, run, processing)
        run_seal(spark, config, settings, run)

    batch("run-1", at(11, 50), [(0, at(10, 5)), (0, at(10, 20), bad), (0, at(11, 40)), (1, at(11, 45))])
    batch("run-2", at(13, 50), [(0, at(10, 30)), (0, at(12, 20), bad), (0, at(13, 40)), (1, at(13, 45))])
    batch("run-3", at(15, 50), [(0, at(14, 20), bad), (1, at(14, 30)), (0, at(15, 40)), (1, at(15, 45))])
    assert layout.dirty_batches() == [0, 1, 2]
    assert registered(spark, config.late_table) == partitions(HOURS[:1])

    def retention(run: str, point: str, cfg: Any = config) -> RetentionResult:
        monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
        monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
        with pytest.raises(InjectedFault):
            run_retention(spark, cfg, settings, run, at(17))
        monkeypatch.delenv("TIDEMARK_FAIL_AT")
        return run_retention(spark, cfg, settings, run, at(17))

    # As of 17:00, 3 h: batches 0 (11:50) and 1 (13:50) lose their dirty records; the late
    # table keeps hours from 14:00 on, so hour 10's late partition goes.
    dirty_only = config.model_copy(update={"retention": config.retention.model_copy(update={"late": None})})
    assert retention("maintain-1", "after_dirty_horizon", dirty_only).side["late_first_kept"] is None
    done = retention("maintain-2", "after_late_horizon")
    assert done.side["dirty_through_batch"] == 1 and done.side["late_first_kept"] == "2026-11-22T14"
    assert layout.dirty_batches() == [2] and not layout.dirty_batch_dir(0).exists()
    assert registered(spark, config.late_table) == [] and registered(spark, table) == partitions(HOURS[:5])
    actions = [(r.action, r.detail) for r in audit.records() if r.action.startswith("retention_")]
    assert actions == [
        ("retention_dirty", {"through_batch": 1}),
        ("retention_late", {"first_kept": "2026-11-22T14"}),
    ]
    with pytest.raises(RebuildError, match=r"retention\.dirty .* batches through 1"):
        plan_rebuild(config, settings, HOURS[3])  # batch 1 fed hour 13 and left a record dirty
    assert plan_rebuild(config, settings, HOURS[4]).sources  # batch 2's dirty records are kept

    # A later late row of hour 10 is never registered again; once the grace has passed (none
    # here), the dropped late hour's files go, that row's included.
    batch("run-4", at(16, 10), [(0, at(10, 50)), (1, at(14, 50))])
    assert registered(spark, config.late_table) == partitions(HOURS[4:])
    assert list((layout.late_dir / partitions(HOURS[:1])[0]).rglob("*.parquet"))
    # The next day's run moves the horizon again; each drop waits out the grace (1 s here) from
    # its own time: hour 10's files (dropped by the earlier run) go, hour 14's (dropped now) wait.
    brief = config.model_copy(
        update={"output": config.output.model_copy(update={"version_retention": timedelta(seconds=1)})}
    )
    time.sleep(1.5)
    last = run_retention(spark, brief, settings, "maintain-3", at(18))
    assert last.side["late_first_kept"] == "2026-11-22T15" and last.files_deleted > 0
    assert last.side["late_hours_deleted"] == [HOURS[0]]
    assert not (layout.late_dir / partitions(HOURS[:1])[0]).exists()
    assert list((layout.late_dir / partitions(HOURS[4:])[0]).rglob("*.parquet"))
    assert registered(spark, config.late_table) == []
    run_verify(spark, config, settings, datetime.now(UTC))
