"""Maintenance's pure rules: which hour is the first kept (``tidemark.retention``), what the
journal's state holds after a drop (``state/journal.py``), which hours are compacted again
(``seal/recompact.py``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.helpers.records import journal_entry
from tidemark.config import TableConfig, load_table_file
from tidemark.retention import first_kept_hour, snapshot_floor
from tidemark.seal.recompact import due_hours
from tidemark.state.journal import EntryKind, JournalState

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def events(**retention: object) -> TableConfig:
    config = load_table_file(ROOT / "conf" / "tables" / "events.yaml")
    return config.model_copy(update={"retention": config.retention.model_validate(retention)})


def sealed(*hours: str) -> JournalState:
    state = JournalState()
    for seq, hour in enumerate(hours):
        state.apply(journal_entry(hour, seq=seq))
    return state


def test_the_first_hour_kept_is_the_one_holding_the_boundary_and_never_an_open_one() -> None:
    state = sealed("2026-11-22T08", "2026-11-22T09", "2026-11-22T10")  # sealed through 11:00
    config = events(hours="2h")

    def first(as_of: datetime) -> str | None:
        hour = first_kept_hour(config, state, as_of)
        return hour.key if hour else None

    assert first(datetime(2026, 11, 22, 11, 30, tzinfo=UTC)) == "2026-11-22T09"
    assert first(datetime(2026, 11, 22, 11, tzinfo=UTC)) == "2026-11-22T09"
    # far in the future: every sealed hour may go, the open ones never
    assert first(datetime(2026, 12, 22, tzinfo=UTC)) == "2026-11-22T11"
    assert first_kept_hour(events(), state, datetime(2026, 12, 22, tzinfo=UTC)) is None  # no retention
    assert first_kept_hour(config, JournalState(), datetime(2026, 12, 22, tzinfo=UTC)) is None


def test_a_snapshot_label_reading_a_kept_hour_keeps_every_hour_it_read() -> None:
    floor = datetime(2026, 11, 22, 10, tzinfo=UTC)
    day = [f"2026-11-22T{h:02d}" for h in range(0, 24)]  # a daily label: its hours straddle the floor
    assert snapshot_floor(floor, [day], "UTC") == datetime(2026, 11, 22, tzinfo=UTC)
    # a label wholly before the floor is frozen; one after it does not move it; they chain
    before = ["2026-11-21T22", "2026-11-21T23"]
    assert snapshot_floor(floor, [before, ["2026-11-22T12"]], "UTC") == floor
    chained = [["2026-11-21T23", "2026-11-22T00"], day]
    assert snapshot_floor(floor, chained, "UTC") == datetime(2026, 11, 21, 23, tzinfo=UTC)


def test_a_drop_removes_the_hours_before_it_and_a_later_step_of_one_is_ignored() -> None:
    state = sealed("2026-11-22T08", "2026-11-22T09", "2026-11-22T10")
    drop = replace(
        journal_entry("2026-11-22T10", seq=3, kind=EntryKind.RETENTION, version=0),
        dropped=("2026-11-22T08", "2026-11-22T09"),
    )
    state.apply(drop)
    assert sorted(state.hours) == ["2026-11-22T10"] and state.dropped == 2
    assert state.sealed_through == "2026-11-22T11:00:00+00:00"  # the frontier stays
    state.apply(journal_entry("2026-11-22T09", seq=4, kind=EntryKind.AMEND, version=2))
    assert sorted(state.hours) == ["2026-11-22T10"]
    restored = JournalState.from_json(state.to_json())  # a checkpoint keeps it
    assert (restored.kept_from, restored.dropped, sorted(restored.hours)) == (
        drop.hour_start,
        2,
        ["2026-11-22T10"],
    )
    assert not drop.published and not drop.quarantined  # never announced, never a quarantine


def test_an_hour_is_compacted_again_when_amends_left_it_in_more_files_than_its_bytes_need() -> None:
    config = events(hours="90d").model_copy(
        update={
            "output": events().output.model_copy(update={"target_file_size": 100}),
            "compaction": events().compaction.model_copy(update={"max_files_per_hour": 3}),
        }
    )
    sizes = {
        "2026-11-22T08": [100],  # one whole file
        "2026-11-22T09": [10, 5],  # a seal and an amend: small files, one would do
        "2026-11-22T10": [100, 100, 30],  # the bytes need three: nothing to gain
        "2026-11-22T11": [90, 60, 60, 60],  # big enough on average, but more than 3 where 3 do
        "2026-11-22T12": [60, 60],  # two files of more than half the target: left alone
        "2026-11-22T13": [1, 1],  # quarantined: never touched
    }
    hours = [
        journal_entry(
            h, "quarantine" if h.endswith("13") else "amend", files=tuple(f"f{i}" for i in range(len(s)))
        )
        for h, s in sizes.items()
    ]
    assert due_hours(config, hours, lambda e: sizes[e.hour]) == ["2026-11-22T09", "2026-11-22T11"]
