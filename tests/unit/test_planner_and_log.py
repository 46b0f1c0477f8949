from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from tidemark.config import TableConfig, parse_table
from tidemark.errors import BatchConflictError, DataLossError, InjectedFault, OffsetsWentBackError
from tidemark.ingest.planner import next_ranges
from tidemark.state.batches import Commit, MqPartitionStats, MqRange, Plan
from tidemark.state.commitlog import CHECKPOINT_EVERY, CommitLog
from tidemark.state.layout import run_key

pytestmark = pytest.mark.unit


def table(**source: object) -> TableConfig:
    return parse_table(
        {
            "table": "t",
            "source": {"topic": "t", **source},
            "schema": {"id": "string", "ts": "timestamp"},
            "event_time": {"field": "ts"},
        },
        "t.yaml",
    )


def test_first_batch_starts_at_earliest_and_is_capped() -> None:
    ranges = next_ranges(table(max_records_per_partition=10), {}, {0: (5, 100), 1: (0, 3)})
    assert ranges == [MqRange(0, 5, 15), MqRange(1, 0, 3)]


def test_next_batch_starts_at_committed_end() -> None:
    ranges = next_ranges(table(), {0: 40, 1: 3}, {0: (0, 50), 1: (0, 3)})
    assert ranges == [MqRange(0, 40, 50), MqRange(1, 3, 3)]


def test_latest_and_explicit_starting_offsets() -> None:
    assert next_ranges(table(starting_offsets="latest"), {}, {0: (0, 9)}) == [MqRange(0, 9, 9)]
    explicit = table(starting_offsets={0: 4})
    assert next_ranges(explicit, {}, {0: (0, 9), 1: (2, 9)}) == [
        MqRange(0, 4, 9),
        MqRange(1, 2, 9),
    ]


def test_retention_gap_fails_with_data_loss_error() -> None:
    with pytest.raises(DataLossError) as info:
        next_ranges(table(), {0: 10}, {0: (25, 40)})
    assert (info.value.topic, info.value.partition, info.value.missing_from, info.value.missing_to) == (
        "t",
        0,
        10,
        25,
    )
    assert "t[0]: offsets 10..24 (15 records)" in str(info.value)


def test_retention_gap_recorded_when_policy_allows() -> None:
    ranges = next_ranges(table(on_data_loss="record_and_continue"), {0: 10}, {0: (25, 40)})
    assert ranges == [MqRange(0, 25, 40, gap_from=10, gap_to=25)]


def plan(batch: int, run: str) -> Plan:
    return Plan("t", batch, run, "t", "2026-11-22T12:00:00+00:00", (MqRange(0, batch * 10, batch * 10 + 10),))


def commit(p: Plan) -> Commit:
    return Commit(
        table="t",
        batch_id=p.batch_id,
        run_id=p.run_id,
        committed_by_run=p.run_id,
        topic="t",
        processing_time=p.processing_time,
        ranges=p.ranges,
        files=(),
        rows_per_hour={},
        mq_partitions=(),
        dirty=1,
        rows=9,
    )


def test_records_are_create_only(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, "t")
    log.write_plan(plan(0, "a"))
    with pytest.raises(BatchConflictError, match="planned concurrently"):
        log.write_plan(plan(0, "b"))
    assert log.plan(0) == plan(0, "a")
    log.write_commit(commit(plan(0, "a")))
    with pytest.raises(BatchConflictError, match="committed by another process"):
        log.write_commit(commit(plan(0, "b")))
    assert log.bind_run("a", 0) == 0
    assert log.bind_run("a", 5) == 0  # first binding wins


def test_state_uses_checkpoint_and_probes_only_newer_commits(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, "t")
    for b in range(CHECKPOINT_EVERY + 3):
        log.write_plan(plan(b, f"r{b}"))
        log.write_commit(commit(plan(b, f"r{b}")))
    assert log.checkpoint_file.local_path().exists()
    # Remove an old commit: the state must not need it any more (it is in the checkpoint).
    (log.commits / f"{0:010d}.json").local_path().unlink()
    state = log.state()
    assert state.last_committed == CHECKPOINT_EVERY + 2
    assert state.batches == CHECKPOINT_EVERY + 3 and state.rows == 9 * state.batches
    assert state.end_offsets == {0: (CHECKPOINT_EVERY + 3) * 10}


def test_run_key_is_safe_and_unique() -> None:
    a, b = run_key("scheduled__2026-11-22T10:00:00+00:00"), run_key("scheduled__2026-11-22T10_00_00_00_00")
    assert "/" not in a and ":" not in a and a != b


def test_partitions_added_later_start_at_earliest_whatever_starting_offsets_says() -> None:
    # first batch: latest skips what was there before tidemark started
    assert next_ranges(table(starting_offsets="latest"), {}, {0: (0, 9)}) == [MqRange(0, 9, 9)]
    # a partition added after the first batch: its early records are new data
    ranges = next_ranges(table(starting_offsets="latest"), {0: 9}, {0: (0, 12), 1: (0, 4)})
    assert ranges == [MqRange(0, 9, 12), MqRange(1, 0, 4)]
    ranges = next_ranges(table(starting_offsets={0: 5}), {0: 9}, {0: (0, 12), 1: (0, 4)})
    assert ranges == [MqRange(0, 9, 12), MqRange(1, 0, 4)]


def test_offsets_that_went_back_raise_a_named_error() -> None:
    with pytest.raises(OffsetsWentBackError, match=r"t\[1\] was read up to offset 40 .* ends at offset 3"):
        next_ranges(table(), {0: 5, 1: 40}, {0: (0, 9), 1: (0, 3)})
    with pytest.raises(
        OffsetsWentBackError, match=r"t\[2\] was read up to offset 7 .* is gone from the broker"
    ):
        next_ranges(table(), {0: 5, 2: 7}, {0: (0, 9)})


def test_a_crash_between_a_commit_record_and_its_checkpoint_loses_only_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = CommitLog(tmp_path, "t")

    def commit(batch: int) -> Commit:
        ranges = (MqRange(0, batch * 10, batch * 10 + 10),)
        return Commit(
            "t",
            batch,
            f"r{batch}",
            f"r{batch}",
            "t",
            "2026-11-22T12:00:00+00:00",
            ranges,
            (),
            {"dt=2026-11-22/hr=10": 10},
            (MqPartitionStats(0, 10, 10, 0),),
            0,
            10,
        )

    for batch in range(CHECKPOINT_EVERY - 1):
        log.write_commit(commit(batch))
    monkeypatch.setenv("TIDEMARK_FAIL_AT", "before_checkpoint")
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    with pytest.raises(InjectedFault):
        log.write_commit(commit(CHECKPOINT_EVERY - 1))
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    assert not log.checkpoint_file.local_path().exists()
    state = log.state()  # probed from the start: nothing lost
    assert state.last_committed == CHECKPOINT_EVERY - 1 and state.rows == 10 * CHECKPOINT_EVERY
    assert state.end_offsets == {0: 10 * CHECKPOINT_EVERY}
    for batch in range(CHECKPOINT_EVERY, 2 * CHECKPOINT_EVERY):
        log.write_commit(commit(batch))
    assert log.checkpoint_file.local_path().exists() and log.state().rows == 20 * CHECKPOINT_EVERY


def test_the_checkpoint_indexes_each_hours_batches(tmp_path: Path) -> None:
    """A rebuild plans from the hour index (hour -> runs of batch ids), not from every commit
    record: it equals what a scan finds, survives checkpoints, and an older release's
    checkpoint (no index) is reported incomplete until the next checkpoint folds it in."""

    rng = random.Random(3)
    log = CommitLog(tmp_path, "t")
    hours = [f"dt=2026-11-22/hr={h:02d}" for h in range(6)]
    touched: dict[str, list[int]] = {h: [] for h in hours}
    for b in range(3 * CHECKPOINT_EVERY + 5):
        current = hours[min(b // 12, 5)]
        rows = {current: 5}
        late = {}
        if rng.random() < 0.2:  # a straggler for an earlier hour
            late = {rng.choice(hours[: hours.index(current) + 1]): 1}
        for h in {*rows, *late}:
            touched[h].append(b)
        log.write_plan(plan(b, f"r{b}"))
        log.write_commit(replace(commit(plan(b, f"r{b}")), rows_per_hour=rows, late_per_hour=late))
    state = log.state()
    assert {h: state.batches_of_hour(h) for h in hours} == touched
    assert all(len(runs) < len(touched[h]) or len(runs) <= 1 for h, runs in state.batches_per_hour.items())
    # an older release's checkpoint has no index: incomplete (a rebuild scans every commit) ...
    checkpoint = json.loads(log.checkpoint_file.local_path().read_text())
    del checkpoint["batches_per_hour"], checkpoint["hour_index_from"]
    log.checkpoint_file.local_path().write_text(json.dumps(checkpoint))
    assert log.state().batches_of_hour(hours[0]) is None
    # ... until the next checkpoint folds every commit once
    assert log.write_checkpoint().batches_of_hour(hours[0]) == touched[hours[0]]
    assert {h: log.state().batches_of_hour(h) for h in hours} == touched
