"""The note a rebuild run gets (pure wording; the scheduler's listener call is covered end to
end by tests/e2e/test_scheduler_backfill.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tidemark.airflow.run_notes import NOTE_LIMIT, rebuild_note

pytestmark = pytest.mark.unit


def test_a_backfill_run_names_the_hour_of_its_data_interval() -> None:
    interval = (datetime(2026, 11, 22, 10, tzinfo=UTC), datetime(2026, 11, 22, 11, tzinfo=UTC))
    note = rebuild_note("events", "UTC", params={}, interval=interval, backfill_id=3)
    assert note == "Rebuilds events hour 2026-11-22T10 (backfill 3)"


def test_the_trigger_forms_range_wins_over_the_interval_and_is_in_the_tables_zone() -> None:
    interval = (datetime(2026, 11, 22, 10, tzinfo=UTC), datetime(2026, 11, 22, 11, tzinfo=UTC))
    params = {"first_hour": "2026-11-20T23", "last_hour": "2026-11-21T01", "dry_run": False}
    note = rebuild_note("events", "Europe/Berlin", params=params, interval=interval)
    assert note == "Rebuilds events hours 2026-11-20T23 .. 2026-11-21T01 (3 hours)"
    assert rebuild_note("events", "UTC", params={**params, "dry_run": True}, interval=interval).startswith(
        "Dry run: would rebuild events hours 2026-11-20T23"
    )


def test_a_bad_range_or_a_manual_run_without_an_hour_says_so() -> None:
    bad = rebuild_note(
        "events",
        "UTC",
        params={"first_hour": "2026-11-21T05", "last_hour": "2026-11-21T01"},
        interval=(None, None),
    )
    assert (
        bad.startswith("Rebuild of events: hour range 2026-11-21T05 .. 2026-11-21T01")
        and len(bad) <= NOTE_LIMIT
    )
    assert rebuild_note("events", "UTC", params={}, interval=(None, None)) == (
        "Rebuild of events: no hour given (set first_hour)"
    )
