"""The one sequential log the commit log, the hour journal and the snapshot log build on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.records import journal_entry
from tidemark.state.journal import EntryKind, JournalState
from tidemark.state.seqlog import SequentialLog
from tidemark.state.storage import Location

pytestmark = pytest.mark.unit


def test_records_are_create_only_and_read_in_order_up_to_the_first_gap(tmp_path: Path) -> None:
    log = SequentialLog(Location(tmp_path / "log"), Location(tmp_path / "checkpoint.json"))
    assert log.create(0, {"n": 0}) and log.create(1, {"n": 1})
    assert not log.create(1, {"n": "second writer"})
    assert log.read(1) == {"n": 1}
    log.create(3, {"n": 3})  # never reached: readers probe names, they never list
    assert [seq for seq, _ in log.records()] == [0, 1]
    assert log.append(lambda seq: {"n": seq}) == (2, {"n": 2})
    assert [r["n"] for _, r in log.records(since=2)] == [2, 3]
    assert log.read_checkpoint() is None
    log.write_checkpoint({"last": 3})
    assert log.read_checkpoint() == {"last": 3}


def test_entry_kinds_say_what_is_published_and_what_moves_the_frontier() -> None:
    state = JournalState()
    state.apply(journal_entry("2026-11-22T10", "quarantine"))
    assert state.quarantined() == ["2026-11-22T10"] and state.sealed_through == "2026-11-22T11:00:00+00:00"
    state.apply(journal_entry("2026-11-22T10", "release", seq=1))
    assert state.quarantined() == [] and state.hours["2026-11-22T10"].published
    assert [k for k in EntryKind if k.published] == [
        EntryKind.SEAL,
        EntryKind.RELEASE,
        EntryKind.AMEND,
        EntryKind.REBUILD,
        EntryKind.COMPACT,
    ]  # not QUARANTINE, not RETENTION (a drop)
    assert journal_entry("2026-11-22T10", "rebuild").to_json()["kind"] == "rebuild"


def test_an_append_reads_a_logarithmic_number_of_records(tmp_path: Path) -> None:
    """Each append used to read every record from 0 (a GET each on S3)."""
    log = SequentialLog(Location(tmp_path / "log"))
    for seq in range(300):
        assert log.create(seq, {"n": seq})
    fresh = SequentialLog(Location(tmp_path / "log"))  # a new process: nothing known yet
    reads: list[int] = []
    original = fresh.read

    def counted(seq: int) -> dict[str, int] | None:
        reads.append(seq)
        return original(seq)

    fresh.read = counted  # type: ignore[method-assign]
    assert fresh.append(lambda seq: {"n": seq}) == (300, {"n": 300})
    assert len(reads) <= 2 * 10  # about 2 log2(300), not 300
    reads.clear()
    assert fresh.append(lambda seq: {"n": seq}) == (301, {"n": 301})
    assert len(reads) <= 2  # it knows where the log ended
    assert [seq for seq, _ in SequentialLog(Location(tmp_path / "log")).records()][-1] == 301
