"""The dump against the real broker and real Spark: exact multisets, dirty reasons, status;
the broker-facing ones against both brokers (tansu and noida-db)."""

from __future__ import annotations

import threading
from collections import Counter
from contextlib import nullcontext
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.classify import HOSTILE, event
from tests.helpers.tables import PROCESSING, START, fresh_table, landed
from tidemark.errors import DirtyRatioExceededError, LeaseLostError
from tidemark.ingest import dump
from tidemark.ingest.dump import run_dump
from tidemark.ingest.kafka import client_properties, commit_group_offsets, group_offsets
from tidemark.observe.metrics import emit_metrics
from tidemark.observe.report import render_report, report_data
from tidemark.observe.status import render, table_status
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.layout import Layout
from tidemark.state.locks import Lease
from tidemark_dev.generator import Message, create_topic, events, produce

pytestmark = pytest.mark.integration


def test_batches_land_exactly_once_with_dirty_reasons(
    spark: Any, any_broker: tuple[str, Settings], tmp_path: Path
) -> None:
    broker, settings = any_broker
    config, settings = fresh_table(
        settings, tmp_path, source__max_records_per_partition=40, dirty__max_dirty_ratio=0.5
    )
    # oversized records are > 1 MiB: a Kafka broker refuses them unless the topic allows more
    create_topic(broker, config.source.topic, 4, {"max.message.bytes": str(8 * 1024 * 1024)})
    delivered = produce(broker, config.source.topic, events(200, start=START, dirty_fraction=0.1))
    results = []
    for i in range(3):  # 200 records / 4 partitions = 50 per partition; cap 40 -> 2 batches + 1 empty
        results.append(run_dump(spark, config, settings, f"run-{i}", PROCESSING))
    assert [r.batch_id for r in results] == [0, 1, 2]
    assert [r.read for r in results] == [160, 40, 0]
    more = produce(broker, config.source.topic, events(60, start=START, seed=8))
    results.append(run_dump(spark, config, settings, "run-3", PROCESSING))
    assert results[-1].read == 60

    rows, dirty, reasons = landed(settings, config.table)
    expected = Counter((p, o) for p, o, _ in delivered + more)
    assert rows + dirty == expected  # every offset exactly once, nothing lost
    assert max((rows + dirty).values()) == 1
    expected_dirty = {(p, o): m.dirty_kind for p, o, m in delivered + more if m.dirty_kind}
    assert reasons == expected_dirty
    assert set(reasons.values()) == {
        "invalid_json",
        "missing_field",
        "type_mismatch",
        "null_event_time",
        "oversized",
    }

    state = CommitLog(settings.state_dir, config.table).state()
    assert state.rows == sum(rows.values()) and state.dirty == sum(dirty.values())
    assert state.end_offsets == {p: 65 for p in range(4)}


def test_retry_of_committed_run_is_a_noop(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 2)
    produce(broker, config.source.topic, events(20, start=START, partitions=2))
    first = run_dump(spark, config, settings, "manual__1", PROCESSING)
    produce(broker, config.source.topic, events(10, start=START, partitions=2, seed=9))
    again = run_dump(spark, config, settings, "manual__1", PROCESSING)
    assert first.status == "committed" and again.status == "already_committed"
    assert again.batch_id == first.batch_id and again.read == 20
    rows, _, _ = landed(settings, config.table)
    assert sum(rows.values()) == 20


def test_future_event_time_is_dirty(spark: Any, broker: str, settings: Settings, tmp_path: Path) -> None:
    config, settings = fresh_table(settings, tmp_path, dirty__max_dirty_ratio=1.0)
    create_topic(broker, config.source.topic, 1)
    far_future = PROCESSING.replace(year=2030)
    delivered = produce(broker, config.source.topic, events(5, start=far_future, partitions=1))
    produce(broker, config.source.topic, events(5, start=START, partitions=1, seed=3))
    result = run_dump(spark, config, settings, "r", PROCESSING)
    _, _, reasons = landed(settings, config.table)
    assert result.dirty == 5
    assert reasons == {(p, o): "future_event_time" for p, o, _ in delivered}


def test_dirty_ratio_exceeded_fails_and_commits_nothing(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, dirty__max_dirty_ratio=0.01)
    create_topic(broker, config.source.topic, 1)
    produce(broker, config.source.topic, events(30, start=START, partitions=1, dirty_fraction=0.5))
    with pytest.raises(DirtyRatioExceededError, match=r"dirty \(.*> max_dirty_ratio 1.0%\)"):
        run_dump(spark, config, settings, "r", PROCESSING)
    assert CommitLog(settings.state_dir, config.table).state().batches == 0
    rows, dirty, _ = landed(settings, config.table)
    assert not rows and not dirty


def test_hostile_messages_land_one_verdict_each_and_rows_keep_their_own_content(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """Through the real broker and the dump: the black-box sequence (two objects in one message,
    a good one, an empty one, a good one) and the hostile corpus, each between good messages.
    Every good row carries the event id produced at its offset."""
    import pyarrow.parquet as pq

    config, settings = fresh_table(settings, tmp_path, dirty__max_dirty_ratio=1.0)
    create_topic(broker, config.source.topic, 1)
    values: list[bytes] = [HOSTILE[0][1] or b"", event(event_id="a"), b"", event(event_id="b")]
    expected: list[str | None] = ["invalid_json", "a", "invalid_json", "b"]
    for i, (_, value, reason) in enumerate(HOSTILE):
        if value is None:
            continue  # tombstones: the generator produces values only
        values += [event(event_id=f"g{i}"), value]
        expected += [f"g{i}", reason if reason is not None else "good"]
    delivered = produce(broker, config.source.topic, [Message(0, v, None, None) for v in values])
    offsets = [o for _, o, _ in delivered]
    result = run_dump(spark, config, settings, "hostile-1", PROCESSING)
    assert result.read == len(values)

    layout = Layout(settings, config.table)
    content: dict[int, str] = {}
    for path in [*layout.open_dir.rglob("*.parquet"), *layout.late_dir.rglob("*.parquet")]:
        for row in pq.read_table(path, columns=["_mq_offset", "event_id"]).to_pylist():
            assert row["_mq_offset"] not in content
            content[row["_mq_offset"]] = row["event_id"]
    dirty: dict[int, str] = {}
    for path in layout.dirty_dir.rglob("*.parquet"):
        for row in pq.read_table(path, columns=["mq_offset", "reason"]).to_pylist():
            assert row["mq_offset"] not in dirty
            dirty[row["mq_offset"]] = row["reason"]
    assert set(content) | set(dirty) == set(offsets) and not set(content) & set(dirty)
    for offset, want in zip(offsets, expected, strict=True):
        if want == "good":
            assert offset in content, (offset, dirty.get(offset))
        elif want in HOSTILE_REASONS:
            assert dirty.get(offset) == want, (offset, want, content.get(offset))
        else:  # a good message: its own event id at its own offset
            assert content.get(offset) == want, (offset, want, dirty.get(offset))


HOSTILE_REASONS = {
    "invalid_json",
    "type_mismatch",
    "event_time_out_of_range",
    "future_event_time",
    "tombstone",
}


def test_group_commit_is_monitoring_only_and_never_moves_backwards(
    spark: Any, any_broker: tuple[str, Settings], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, settings = any_broker

    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 2)
    produce(broker, config.source.topic, events(40, start=START, partitions=2))
    conf = client_properties(settings.kafka_bootstrap, {})
    # A failing group commit (injected where the client would raise) leaves the batch committed.
    monkeypatch.setenv("TIDEMARK_FAIL_AT", "group_commit")
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    first = run_dump(spark, config, settings, "g-1", PROCESSING)
    assert first.status == "committed" and first.read == 40
    sent: dict[str, float] = {}
    emit_metrics(config, settings, gauge=sent.__setitem__)
    assert sent[f"tidemark.{config.table}.group_commit_failed"] == 1.0
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    # The retry of the committed run commits the group; a replay never moves it backwards.
    assert run_dump(spark, config, settings, "g-1", PROCESSING).status == "already_committed"
    assert group_offsets(conf, config.consumer_group, config.source.topic, [0, 1]) == {0: 20, 1: 20}
    commit_group_offsets(conf, config.consumer_group, config.source.topic, {0: 35, 1: 35})
    assert run_dump(spark, config, settings, "g-1", PROCESSING).status == "already_committed"
    assert group_offsets(conf, config.consumer_group, config.source.topic, [0, 1]) == {0: 35, 1: 35}
    emit_metrics(config, settings, gauge=sent.__setitem__)
    assert sent[f"tidemark.{config.table}.group_commit_failed"] == 0.0


def test_a_cleared_or_queued_run_judges_future_times_by_the_clock_of_its_plan(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """The run of interval [11:00, 12:00) runs two hours late (cleared, queued, backfilled):
    records of 13:50 are current, not future; the plan records the wall clock it was made at."""

    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 2)
    now = PROCESSING + timedelta(hours=2, minutes=5)
    produce(
        broker,
        config.source.topic,
        events(30, start=now - timedelta(minutes=15), partitions=2, span=timedelta(minutes=10)),
    )
    result = run_dump(spark, config, settings, "scheduled__11", PROCESSING, planned_at=now)
    assert (result.read, result.rows, result.dirty) == (30, 30, 0)
    plan = CommitLog(settings.state_dir, config.table).plan(result.batch_id)
    assert (
        plan is not None
        and plan.planned_at == now.isoformat()
        and plan.processing_time == PROCESSING.isoformat()
    )
    # a retry later still sees the same batch
    again = run_dump(
        spark, config, settings, "scheduled__11", PROCESSING, planned_at=now + timedelta(hours=5)
    )
    assert again.status == "already_committed" and again.batch_id == result.batch_id


def test_a_dump_paused_past_its_lease_before_rollback_deletes_nothing_committed(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zombie: a dump planned its batch, then froze (GC, a stopped VM: no renewals) before
    its rollback. Its lease expired, the retry of the same run committed the batch. When the
    zombie resumes it must not roll back (delete) the committed batch's files: it stops with
    LeaseLostError, and every offset is still there exactly once."""

    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 4)
    delivered = produce(broker, config.source.topic, events(40, start=START))
    monkeypatch.setenv("TIDEMARK_LOCK_LEASE_S", "1")
    monkeypatch.setattr(Lease, "renewing", lambda self: nullcontext())  # frozen: no renewals
    frozen, resume = threading.Event(), threading.Event()
    real = dump.publisher

    def pausing_publisher(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "zombie" and not frozen.is_set():
            frozen.set()
            resume.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(dump, "publisher", pausing_publisher)
    outcome: list[BaseException] = []

    def zombie() -> None:
        try:
            run_dump(spark, config, settings, "run-1", PROCESSING)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=zombie, name="zombie")
    thread.start()
    assert frozen.wait(120), "the zombie never reached its rollback"
    retried = run_dump(spark, config, settings, "run-1", PROCESSING)  # waits out the lease
    assert (retried.status, retried.read) == ("committed", 40)
    resume.set()
    thread.join(120)
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseLostError), outcome
    rows, dirty, _ = landed(settings, config.table)
    assert rows + dirty == Counter((p, o) for p, o, _ in delivered)


def test_tombstones_are_counted_apart_and_the_status_adds_up(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """A batch with tombstones (messages without a value): `tidemark status` (text and JSON),
    the metrics and the health page show them, and each listed batch states
    read == rows + dirty + tombstones + late with its numbers."""

    config, settings = fresh_table(settings, tmp_path, dirty__max_dirty_ratio=1.0)
    create_topic(broker, config.source.topic, 1)
    values = [event(event_id=f"g{i}") for i in range(6)] + [None, None, b"{not json"]
    produce(broker, config.source.topic, [Message(0, v, None, None) for v in values])
    result = run_dump(spark, config, settings, "tomb-1", PROCESSING)
    assert result.read == 9
    status = table_status(config, settings)
    assert (status["rows"], status["dirty"], status["tombstones"], status["late"]) == (6, 1, 2, 0)
    (batch,) = status["recent_batches"]
    assert (batch["read"], batch["rows"], batch["dirty"], batch["tombstones"]) == (9, 6, 1, 2)
    line = (
        "read 9 == rows 6 + dirty 1 + tombstones 2 + late 0: holds; "
        "offsets spanned 9 == read 9 + without a message 0"
    )
    assert batch["reconciliation"] == line
    text = render(status)
    assert "rows 6, dirty 1, tombstones 2, late 0" in text and f"#0 run tomb-1: {line}" in text
    sent = emit_metrics(config, settings, gauge=lambda name, value: None)
    assert sent[f"tidemark.{config.table}.tombstones"] == 2
    assert sent[f"tidemark.{config.table}.batch.tombstones"] == 2
    assert "tombstones 2" in render_report(report_data(config, settings))


def test_json_with_epoch_millis_event_times_lands_by_event_time(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """The most common Kafka JSON event time, epoch milliseconds, through the real broker and
    the dump with ``source.conversions``: every row at its own offset with its own instant and
    hour; an ISO string on that topic is a type mismatch naming the field."""
    import pyarrow.parquet as pq

    config, settings = fresh_table(
        settings,
        tmp_path,
        dirty__max_dirty_ratio=1.0,
        source__conversions={"event_time": {"from": "epoch_millis"}},
    )
    create_topic(broker, config.source.topic, 1)
    instants = [START + timedelta(minutes=m, milliseconds=m) for m in (5, 59, 61)]
    values = [event(event_id=f"e{i}", event_time=int(t.timestamp() * 1000)) for i, t in enumerate(instants)]
    values.append(event(event_id="iso", event_time=START.isoformat()))
    delivered = produce(broker, config.source.topic, [Message(0, v, None, None) for v in values])
    result = run_dump(spark, config, settings, "epoch-1", PROCESSING)
    assert (result.read, result.rows, result.dirty) == (4, 3, 1)
    layout = Layout(settings, config.table)
    rows = {}
    for path in layout.open_dir.rglob("*.parquet"):
        hour = str(path.parent.relative_to(layout.open_dir))
        # a Hive table's batch files are in its sealed format: INT96 instants, UTC without a zone
        read = pq.read_table(
            path, columns=["_mq_offset", "event_id", "event_time"], coerce_int96_timestamp_unit="us"
        )
        for row in read.to_pylist():
            rows[row["_mq_offset"]] = (row["event_id"], row["event_time"].replace(tzinfo=UTC), hour)
    offsets = [o for _, o, _ in delivered]
    assert rows == {
        offsets[i]: (f"e{i}", instants[i], f"dt=2026-11-22/hr={10 if i < 2 else 11}") for i in range(3)
    }
    (dirty,) = [
        r
        for p in layout.dirty_dir.rglob("*.parquet")
        for r in pq.read_table(p, columns=["mq_offset", "reason", "detail"]).to_pylist()
    ]
    assert dirty == {"mq_offset": offsets[3], "reason": "type_mismatch", "detail": "fields=event_time"}
