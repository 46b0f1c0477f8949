"""Which (hour, version) pairs announce emits: pure parts of tidemark.announce."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tidemark.announce import already_announced, latest_versions
from tidemark.partitions import JournalEntry, PartitionState

pytestmark = pytest.mark.unit


def entry(seq: int, hour: str, kind: str, version: int) -> JournalEntry:
    return JournalEntry(
        seq=seq,
        table="t",
        hour=hour,
        hour_start="2026-11-22T10:00:00+00:00",
        hour_end="2026-11-22T11:00:00+00:00",
        kind=kind,
        version=version,
        rows=1,
        late=0,
        files=(),
        sealed_at="2026-11-22T12:00:00+00:00",
        run_id="r",
        ready_time=None,
        processing_time="",
        folded_through_batch=0,
    )


def test_amend_supersedes_seal_and_quarantine_is_never_published() -> None:
    entries = [
        entry(0, "2026-11-22T10", "seal", 1),
        entry(1, "2026-11-22T11", "quarantine", 0),
        entry(2, "2026-11-22T10", "amend", 2),
    ]
    assert latest_versions(entries) == {"2026-11-22T10": 2}
    assert latest_versions([*entries, entry(3, "2026-11-22T11", "release", 1)]) == {
        "2026-11-22T10": 2,
        "2026-11-22T11": 1,
    }


def test_quarantine_is_decided_for_the_frontier_but_release_does_not_move_it() -> None:
    state = PartitionState()
    state.apply(entry(0, "2026-11-22T10", "quarantine", 0))
    assert state.sealed_through == "2026-11-22T11:00:00+00:00"
    state.apply(entry(1, "2026-11-22T10", "release", 1))
    assert (
        state.sealed_through == "2026-11-22T11:00:00+00:00" and state.hours["2026-11-22T10"].kind == "release"
    )


def test_already_announced_reads_partition_keys_and_versions_of_events() -> None:
    events = [
        SimpleNamespace(partition_key="2026-11-22T10", extra={"versions": {"2026-11-22T10": 2}}),
        SimpleNamespace(partition_key=None, extra={}),
    ]
    assert already_announced(events) == {("2026-11-22T10", 2)}
