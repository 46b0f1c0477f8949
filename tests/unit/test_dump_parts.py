"""The pure parts of the dump: folding staged counts, reconciliation, the publisher's target
names and rollback, the warehouse's file names, and readers of older state records."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tidemark.errors import ReconciliationError
from tidemark.ingest.counts import StagedCount, check_files, fold_stats, reconcile, reconcile_reads
from tidemark.ingest.publishers import publisher
from tidemark.ingest.publishers.renaming import RenamingPublisher
from tidemark.ingest.replay import ReplayError, ReplayRequest
from tidemark.settings import Settings
from tidemark.state.batches import Commit, MqRange, Plan
from tidemark.state.commitlog import LogState
from tidemark.state.layout import Layout, batch_file_name, batch_of_file, run_key, sealed_file_prefix
from tidemark.state.storage import Location
from tidemark.time.watermarks import BatchObservation, ReadyTime, advance, ready_time

pytestmark = pytest.mark.unit

T10 = datetime(2026, 11, 22, 10, 5, tzinfo=UTC)
T11 = datetime(2026, 11, 22, 11, 50, tzinfo=UTC)


def plan(*ranges: MqRange) -> Plan:
    return Plan("t", 3, "run-3", "topic", "2026-11-22T12:00:00+00:00", tuple(ranges))


def receipt(p: int, start: int, end: int, read: int) -> dict[str, int]:
    return {"mq_partition": p, "start": start, "end": end, "read": read}


COUNTS = [
    StagedCount(0, "2026-11-22", "10", False, None, 5, T10, T10),
    StagedCount(0, "2026-11-22", "11", False, None, 2, T11, T11),
    StagedCount(0, "2026-11-22", "09", True, None, 1, T10, T10),
    StagedCount(0, None, None, False, "invalid_json", 2),
    # a second task of the same MQ partition and hour: counts add up
    StagedCount(0, "2026-11-22", "10", False, None, 3, T10, T11),
    StagedCount(1, None, None, False, "type_mismatch", 1),
]


def test_fold_sums_per_mq_partition_hour_and_reason_in_any_order() -> None:
    for counts in (COUNTS, list(reversed(COUNTS))):
        folded = fold_stats(counts)
        zero = folded.per_mq_partition[0]
        assert (zero.rows, zero.late, zero.dirty) == (10, 1, 2)
        assert (zero.min_ts, zero.max_ts) == (T10, T11)
        one = folded.per_mq_partition[1]
        assert (one.rows, one.late, one.dirty, one.min_ts) == (0, 0, 1, None)
        assert folded.rows_per_hour == {"dt=2026-11-22/hr=10": 8, "dt=2026-11-22/hr=11": 2}
        assert folded.late_per_hour == {"dt=2026-11-22/hr=09": 1}
        assert folded.reasons == {"invalid_json": 2, "type_mismatch": 1}


def test_reconcile_accepts_matching_counts_and_names_every_mismatch() -> None:
    folded = fold_stats(COUNTS)
    p = plan(MqRange(0, 100, 113), MqRange(1, 0, 1))
    stats = reconcile(p, [receipt(0, 100, 113, 13), receipt(1, 0, 1, 1)], folded.per_mq_partition)
    assert [(s.mq_partition, s.read, s.rows, s.dirty, s.late) for s in stats] == [
        (0, 13, 10, 2, 1),
        (1, 1, 0, 1, 0),
    ]
    assert stats[0].max_event_time == T11.isoformat()

    with pytest.raises(ReconciliationError) as failed:
        reconcile(p, [receipt(0, 100, 113, 14)], folded.per_mq_partition)
    message = str(failed.value)
    assert "t batch 3 (run run-3) not committed" in message
    assert "topic[0] offsets 100..112: read 14 != rows 10 + dirty 2 + late 1" in message
    assert "topic[1] 0..0: no read receipt" in message


def test_staged_file_footers_must_hold_the_counted_rows() -> None:
    stats = reconcile(
        plan(MqRange(0, 0, 13)), [receipt(0, 0, 13, 13)], fold_stats(COUNTS[:5]).per_mq_partition
    )
    check_files(plan(MqRange(0, 0, 13)), {"rows": 10, "late": 1, "dirty": 2}, stats)
    with pytest.raises(ReconciliationError, match="staged files hold"):
        check_files(plan(MqRange(0, 0, 13)), {"rows": 9, "late": 1, "dirty": 2}, stats)


def test_publisher_targets_are_deterministic_and_rollback_removes_published_files(tmp_path: Path) -> None:
    layout = Layout(replace(Settings.from_env(), warehouse=str(tmp_path)), "t")
    first = publisher(layout, 7)
    assert isinstance(first, RenamingPublisher)  # a local warehouse: staged, then moved
    for kind, hour in (
        ("rows", "dt=2026-11-22/hr=10"),
        ("rows", "dt=2026-11-22/hr=11"),
        ("late", "dt=2026-11-22/hr=09"),
    ):
        for task in ("p0-000000000000", "p1-000000000000"):
            path = first.attempt_dir / kind / hour / f"{task}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")
    (first.attempt_dir / "dirty").mkdir()
    (first.attempt_dir / "dirty" / "p0-000000000000.parquet").write_bytes(b"x")
    targets = [t for _, t in first.targets()]
    assert targets == [
        "t/_open/dt=2026-11-22/hr=10/part-b0000000007-00000.parquet",
        "t/_open/dt=2026-11-22/hr=10/part-b0000000007-00001.parquet",
        "t/_open/dt=2026-11-22/hr=11/part-b0000000007-00002.parquet",
        "t/_open/dt=2026-11-22/hr=11/part-b0000000007-00003.parquet",
        "t__late/dt=2026-11-22/hr=09/part-b0000000007-00000.parquet",
        "t__late/dt=2026-11-22/hr=09/part-b0000000007-00001.parquet",
        "t__dirty/batch_id=7/part-00000.parquet",
    ]
    assert first.targets() == first.targets()
    published = first.publish()
    # before the commit record only the hidden _open rows are in place: nothing visible
    assert [t for t in published if (tmp_path / t).exists()] == targets[:4]
    assert not (tmp_path / "t__late").exists() and not (tmp_path / "t__dirty").exists()
    # a retry of the uncommitted batch undoes exactly what the first attempt moved
    assert publisher(layout, 7).rollback() == 4
    assert not any((tmp_path / t).exists() for t in published)
    assert not layout.batch_staging(7).exists()


def test_after_the_commit_record_finish_makes_late_and_dirty_files_visible(tmp_path: Path) -> None:
    layout = Layout(replace(Settings.from_env(), warehouse=str(tmp_path)), "t")
    attempt = publisher(layout, 3)
    for kind, sub in (("rows", "dt=2026-11-22/hr=10/"), ("late", "dt=2026-11-22/hr=09/"), ("dirty", "")):
        path = attempt.attempt_dir / kind / f"{sub}p0-000000000000.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    published = attempt.publish()
    assert publisher(layout, 3).finish() == 2  # e.g. by the next job, after a crash
    assert all((tmp_path / t).exists() for t in published)
    assert not layout.batch_staging(3).exists()
    assert publisher(layout, 3).finish() == 0


def test_file_names_are_built_and_parsed_in_one_place() -> None:
    name = batch_file_name(42, 3)
    assert name == "part-b0000000042-00003.parquet" and batch_of_file(name) == 42
    assert batch_of_file("part-00001.parquet") is None
    assert (sealed_file_prefix(1), sealed_file_prefix(3)) == ("part", "part-v0003")
    assert run_key("scheduled__2026-11-22T10:00:00+00:00") != run_key("scheduled__2026-11-22T10_00_00_00_00")


def test_records_written_with_the_old_partition_words_are_still_read() -> None:
    old = {
        "table": "t",
        "batch_id": 0,
        "run_id": "r",
        "committed_by_run": "r",
        "topic": "topic",
        "processing_time": "2026-11-22T12:00:00+00:00",
        "ranges": [{"partition": 0, "start": 0, "end": 3, "gap_from": None, "gap_to": None}],
        "files": ["t/_open/dt=2026-11-22/hr=10/part-b0000000000-00000.parquet"],
        "rows_per_partition": {"dt=2026-11-22/hr=10": 3},
        "late_per_partition": {},
        "partitions": [{"partition": 0, "read": 3, "rows": 3, "dirty": 0}],
        "dirty": 0,
        "rows": 3,
        "watermarks": [{"partition": 0, "end_offset": 3, "last_moved_at": "2026-11-22T12:00:00+00:00"}],
        "ready": {
            "time": None,
            "processing_time": "2026-11-22T12:00:00+00:00",
            "partitions": [{"partition": 0, "end_offset": 3, "last_moved_at": "2026-11-22T12:00:00+00:00"}],
        },
    }
    commit = Commit.from_json(old)
    assert commit.ranges[0].mq_partition == 0 and commit.mq_partitions[0].rows == 3
    assert commit.rows_per_hour == {"dt=2026-11-22/hr=10": 3}
    assert commit.watermarks[0].mq_partition == 0
    assert isinstance(commit.ready, ReadyTime) and commit.ready.mq_partitions[0].end_offset == 3
    # and a record written now reads back the same
    assert Commit.from_json(commit.to_json()) == commit
    assert Location("hdfs://nn/x") / "y" == Location("hdfs://nn/x/y")


def test_tombstones_are_reconciled_apart_from_dirty_records() -> None:
    counts = [
        StagedCount(0, "2026-11-22", "10", False, None, 3, T10, T10),
        StagedCount(0, None, None, False, "tombstone", 2),
        StagedCount(0, None, None, False, "invalid_json", 1),
    ]
    folded = fold_stats(counts)
    tally = folded.per_mq_partition[0]
    assert (tally.rows, tally.dirty, tally.tombstones) == (3, 1, 2)
    (stats,) = reconcile(plan(MqRange(0, 0, 6)), [receipt(0, 0, 6, 6)], folded.per_mq_partition)
    assert (stats.dirty, stats.tombstones) == (1, 2)
    check_files(plan(MqRange(0, 0, 6)), {"rows": 3, "late": 0, "dirty": 3}, [stats])


def test_a_partition_with_only_invalid_records_turns_idle() -> None:
    t0 = datetime(2026, 11, 22, 12, tzinfo=UTC)
    wm = advance(
        {},
        [BatchObservation(0, 10, T11.isoformat()), BatchObservation(1, 10, T10.isoformat())],
        processing_time=t0,
        max_out_of_orderness=timedelta(0),
    )
    later = t0 + timedelta(minutes=30)
    # partition 1's end offset keeps moving, but only with dirty records: no event time
    wm = advance(
        wm,
        [BatchObservation(0, 20, T11.isoformat()), BatchObservation(1, 90, None)],
        processing_time=later,
        max_out_of_orderness=timedelta(0),
    )
    ready = ready_time(wm, processing_time=later, idle_timeout=timedelta(minutes=30))
    assert ready.idle == (1,) and ready.time == T11.isoformat()


def test_a_replay_reconciles_against_the_records_it_found_and_refuses_staged_records_nothing_read() -> None:
    folded = fold_stats(COUNTS)
    stats = reconcile_reads(plan(), {0: 13, 1: 1}, folded.per_mq_partition)
    assert [(s.mq_partition, s.read, s.rows, s.dirty, s.late) for s in stats] == [
        (0, 13, 10, 2, 1),
        (1, 1, 0, 1, 0),
    ]
    with pytest.raises(ReconciliationError, match=r"staged records of MQ partitions \[1\] that nothing read"):
        reconcile_reads(plan(), {0: 13}, folded.per_mq_partition)
    with pytest.raises(ReconciliationError, match=r"topic\[0\] dirty records: read 12 != rows 10"):
        reconcile_reads(plan(), {0: 12, 1: 1}, folded.per_mq_partition, where={0: "dirty records"})


def test_a_replay_commit_takes_over_the_dirty_records_it_replayed_in_the_totals() -> None:
    dump = Commit("t", 0, "r0", "r0", "topic", "p", (MqRange(0, 0, 10),), (), {"dt=D/hr=10": 7}, (), 3, 7)
    replay = Commit(
        "t", 1, "r1", "r1", "topic", "p", (), (), {"dt=D/hr=10": 2}, (), 1, 2,
        extra={"replay": {"batches": [0], "dirty_replaced": 3}},
    )  # fmt: skip
    state = LogState()
    state.apply(dump)
    state.apply(replay)
    assert (state.rows, state.dirty, state.end_offsets) == (9, 1, {0: 10})
    assert replay.replayed_batches == (0,) and dump.replayed_batches == () and dump.dirty_replaced == 0
    assert ReplayRequest.parse_batches("all") is None and ReplayRequest.parse_batches(" 5,3,5 ") == (3, 5)
    with pytest.raises(ReplayError, match="neither 'all' nor a list"):
        ReplayRequest.parse_batches("last")


def test_finish_hides_the_replayed_dirty_records_before_showing_the_replays_own(tmp_path: Path) -> None:
    layout = Layout(replace(Settings.from_env(), warehouse=str(tmp_path)), "t")
    old = layout.dirty_file(2, 0)
    old.parent.mkdir(parents=True)
    old.write_bytes(b"old")
    attempt = publisher(layout, 5)
    staged = attempt.attempt_dir / "dirty" / "p0-000000000000.parquet"
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"new")
    attempt.publish(retire=(2,))
    assert old.exists()  # nothing changes before the commit record
    assert publisher(layout, 5).finish() == 1
    assert not layout.dirty_batch_dir(2).exists()
    assert (layout.replayed_dirty_dir(2) / old.name).read_bytes() == b"old"
    assert layout.dirty_file(5, 0).read_bytes() == b"new"
    assert layout.dirty_files_of(2) == [str(layout.replayed_dirty_dir(2) / old.name)]
