"""Which (hour, version) pairs announce emits: pure parts of tidemark.seal.announce."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.helpers.records import journal_entry
from tidemark.seal.announce import already_announced, latest_versions
from tidemark.state.journal import JournalEntry, JournalState

pytestmark = pytest.mark.unit


def entry(seq: int, hour: str, kind: str, version: int) -> JournalEntry:
    return journal_entry(
        hour, kind, version, seq=seq, sealed_at="2026-11-22T12:00:00+00:00", folded_through_batch=0
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
    state = JournalState()
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
