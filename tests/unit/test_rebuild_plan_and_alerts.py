"""Pure parts of rebuilds and alerts: which hours a run owns (DST included), the trigger form's
ranges, the broker-offset check, feeding batches read from a commit log on disk, overdue hours
and the failure record."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers.records import journal_entry
from tidemark.config import TableConfig, parse_table
from tidemark.errors import DataLossError, RebuildError, SealDeadlineMissedError
from tidemark.observe.alerts import (
    describe_overdue,
    group_overdue,
    overdue_hours,
    recent_failures,
    record_failure,
)
from tidemark.observe.report import render_report, report_data
from tidemark.seal.rebuild_plan import check_offsets, hour_range, hours_between, plan_rebuild
from tidemark.settings import Settings
from tidemark.state.batches import Commit, MqPartitionStats, MqRange, Plan
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.time.watermarks import ReadyTime

pytestmark = pytest.mark.unit

DAY = datetime(2026, 11, 22, tzinfo=UTC)


def at(hh: int, mm: int = 0) -> datetime:
    return DAY + timedelta(hours=hh, minutes=mm)


def table(**extra: object) -> TableConfig:
    return parse_table(
        {
            "table": "t",
            "source": {"topic": "t"},
            "schema": {"id": "string", "ts": "timestamp"},
            "event_time": {"field": "ts"},
            "watermark": {"commit_delay": "5m", "seal_grace": "30m"},
            **extra,
        },
        "t.yaml",
    )


def test_a_data_interval_owns_the_hours_starting_in_it() -> None:
    assert [h.key for h in hours_between(at(10), at(11), "UTC")] == ["2026-11-22T10"]
    assert [h.key for h in hours_between(at(10, 30), at(12), "UTC")] == ["2026-11-22T11"]
    assert hours_between(at(10), at(10), "UTC") == []
    # Fall back in New York: the repeated local hour 01 is two partitions, 01 and 01b.
    fall = datetime(2026, 11, 1, 5, tzinfo=UTC)
    keys = [h.key for h in hours_between(fall, fall + timedelta(hours=2), "America/New_York")]
    assert keys == ["2026-11-01T01", "2026-11-01T01b"]


def test_trigger_form_ranges_are_checked() -> None:
    assert [h.key for h in hour_range("2026-11-22T10", "2026-11-22T12", "UTC")] == [
        "2026-11-22T10",
        "2026-11-22T11",
        "2026-11-22T12",
    ]
    with pytest.raises(RebuildError, match="the last hour is before the first"):
        hour_range("2026-11-22T12", "2026-11-22T10", "UTC")
    with pytest.raises(RebuildError, match="at most 168 per run"):
        hour_range("2026-11-01T00", "2026-11-22T00", "UTC")


def write_history(state: Path) -> CommitLog:
    """Batch 0 feeds hour 10, batch 1 feeds hour 11 and a late row of 10, batch 2 only 12."""
    log = CommitLog(state, "t")
    hours = [
        ({"dt=2026-11-22/hr=10": 5}, {}),
        ({"dt=2026-11-22/hr=11": 4}, {"dt=2026-11-22/hr=10": 1}),
        ({"dt=2026-11-22/hr=12": 2}, {}),
    ]
    for batch, (rows, late) in enumerate(hours):
        ranges = (MqRange(0, batch * 10, batch * 10 + 10),)
        log.write_plan(Plan("t", batch, f"run-{batch}", "t", at(12).isoformat(), ranges, None))
        log.write_commit(
            Commit(
                table="t",
                batch_id=batch,
                run_id=f"run-{batch}",
                committed_by_run=f"run-{batch}",
                topic="t",
                processing_time=at(12).isoformat(),
                ranges=ranges,
                files=(),
                rows_per_hour=rows,
                mq_partitions=(MqPartitionStats(0, 10, sum(rows.values()), 0),),
                dirty=0,
                rows=sum(rows.values()),
                late_per_hour=late,
                ready=ReadyTime(time=at(12, 20).isoformat(), processing_time=at(12, 30).isoformat()),
            )
        )
    return log


def seal(state: Path, seq: int, hour: int, kind: str = "seal") -> None:
    HourJournal(state, "t").append(
        journal_entry(
            f"2026-11-22T{hour:02d}",
            kind,
            seq=seq,
            rows=5,
            sealed_at=at(12).isoformat(),
            run_id="run-1",
            folded_through_batch=1,
        )
    )


def test_plan_lists_the_feeding_batches_and_refuses_unpublished_hours(tmp_path: Path) -> None:
    settings = replace(Settings.from_env(), state_uri=str(tmp_path))
    write_history(tmp_path)
    seal(tmp_path, 0, 10)
    seal(tmp_path, 1, 11, kind="quarantine")
    side = plan_rebuild(table(), settings, "2026-11-22T10")
    assert [s.batch_id for s in side.sources] == [0, 1] and side.expected_rows == 5
    amend = plan_rebuild(table(late_policy="amend"), settings, "2026-11-22T10")
    assert (amend.expected_rows, amend.expected_late, amend.through_batch) == (6, 1, 2)
    assert (
        "b0 ([0] 0..9: 5 rows)" in amend.describe() and "b1 ([0] 10..19: 0 rows, 1 late)" in amend.describe()
    )
    with pytest.raises(RebuildError, match="2026-11-22T11 is quarantined"):
        plan_rebuild(table(), settings, "2026-11-22T11")
    with pytest.raises(RebuildError, match="2026-11-22T12 is not sealed yet"):
        plan_rebuild(table(), settings, "2026-11-22T12")


def test_offsets_must_still_be_on_the_broker(tmp_path: Path) -> None:
    settings = replace(Settings.from_env(), state_uri=str(tmp_path))
    write_history(tmp_path)
    seal(tmp_path, 0, 10)
    plan = plan_rebuild(table(), settings, "2026-11-22T10")
    check_offsets(plan, "t", {0: (0, 30)})
    with pytest.raises(
        DataLossError, match=r"t\[0\]: offsets 0\.\.2 .*hour 2026-11-22T10 of t needs them \(batch 0\)"
    ):
        check_offsets(plan, "t", {0: (3, 30)})  # retention removed 0..2
    with pytest.raises(DataLossError, match=r"offsets 10\.\.19 "):
        check_offsets(plan, "t", {0: (0, 10)})  # the topic was recreated: batch 1's range is gone
    with pytest.raises(DataLossError, match=r"offsets 0\.\.9 "):
        check_offsets(plan, "t", {})  # the partition no longer exists


def test_overdue_hours_count_from_the_sealed_frontier(tmp_path: Path) -> None:
    settings = replace(Settings.from_env(), state_uri=str(tmp_path))
    config = table()
    assert overdue_hours(config, settings, at(23)) == {}  # no data, nothing expected
    write_history(tmp_path)
    seal(tmp_path, 0, 10)
    # hour 11 is due at 12:35; hour 12 at 13:35
    assert overdue_hours(config, settings, at(12, 34)) == {}
    overdue = overdue_hours(config, settings, at(13, 40))
    assert list(overdue) == ["2026-11-22T11", "2026-11-22T12"]
    assert overdue["2026-11-22T11"].startswith("due 2026-11-22T12:35:00+00:00; ")


def test_a_table_stalled_for_fifty_hours_is_one_alert_line_naming_the_range_and_the_command(
    tmp_path: Path,
) -> None:
    """Hour 10 sealed, then nothing for two days: 51 overdue hours held by the same thing are
    one range with its reason and the command that explains it, in the error and on the page."""

    settings = replace(Settings.from_env(), state_uri=str(tmp_path))
    config = table()
    write_history(tmp_path)
    seal(tmp_path, 0, 10)
    overdue = overdue_hours(config, settings, at(10) + timedelta(hours=53))
    assert len(overdue) == 51
    (stall,) = group_overdue(config, overdue)
    assert (stall.first, stall.last, stall.hours) == ("2026-11-22T11", "2026-11-24T13", 51)
    (line,) = describe_overdue(config, overdue)
    assert line.startswith("2026-11-22T11 .. 2026-11-24T13 (51 hours): due since 2026-11-22T12:35:00+00:00; ")
    assert line.endswith("explain: tidemark status --table t --hour 2026-11-22T11")
    error = str(SealDeadlineMissedError("t", overdue, describe_overdue(config, overdue)))
    assert "51 hour(s) missed their seal deadline, in 1 range(s)" in error and error.count("\n") == 1

    page = render_report(report_data(config, settings, as_of=at(10) + timedelta(hours=53)))
    assert "51 hour(s) past their seal deadline" in page and page.count("due since") == 1
    # two stalls apart (hour 12 sealed in between) are two ranges, oldest first
    apart = {k: v for k, v in overdue.items() if k != "2026-11-22T12"}
    assert [(r.first, r.last) for r in group_overdue(config, apart)] == [
        ("2026-11-22T11", "2026-11-22T11"),
        ("2026-11-22T13", "2026-11-24T13"),
    ]


def test_a_failure_is_recorded_newest_first_and_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEMARK_STATE_DIR", str(tmp_path))
    for attempt in (1, 2):
        ti = SimpleNamespace(dag_id="tidemark_ingest_t", task_id="seal", run_id="r", try_number=attempt)
        record_failure("t", {"task_instance": ti, "exception": RuntimeError(f"boom {attempt}")})
    failures = recent_failures(Settings.from_env(), "t")
    assert [(f["task_id"], f["try_number"], f["error"]) for f in failures] == [
        ("seal", 2, "boom 2"),
        ("seal", 1, "boom 1"),
    ]
    record_failure("t", {})  # a malformed context is logged, not raised
