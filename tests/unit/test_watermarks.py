"""Watermarks and the global ready time: monotonic, idle partitions, future clocks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tidemark.time.watermarks import BatchObservation, MqWatermark, advance, ready_time

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
OOO = timedelta(minutes=10)
IDLE = timedelta(minutes=30)


def _step(
    wm: dict[int, MqWatermark], at: datetime, *obs: tuple[int, int, str | None]
) -> dict[int, MqWatermark]:
    return advance(
        wm, [BatchObservation(p, end, ts) for p, end, ts in obs], processing_time=at, max_out_of_orderness=OOO
    )


def test_watermark_is_max_event_time_minus_tolerance_and_never_goes_back() -> None:
    wm = _step({}, T0, (0, 10, "2026-11-22T11:30:00+00:00"))
    assert wm[0].watermark == "2026-11-22T11:20:00+00:00"
    wm = _step(wm, T0 + timedelta(minutes=10), (0, 20, "2026-11-22T11:00:00+00:00"))
    assert wm[0].watermark == "2026-11-22T11:20:00+00:00"
    assert wm[0].last_moved_at == (T0 + timedelta(minutes=10)).isoformat()


def test_ready_time_is_the_minimum_over_active_partitions() -> None:
    wm = _step({}, T0, (0, 10, "2026-11-22T11:30:00+00:00"), (1, 5, "2026-11-22T10:40:00"))
    ready = ready_time(wm, processing_time=T0, idle_timeout=IDLE)
    assert ready.time == "2026-11-22T10:30:00+00:00"  # naive Spark times are UTC
    assert ready.holding == 1 and ready.idle == ()


def test_idle_partition_is_released_after_timeout_and_held_again_when_it_resumes() -> None:
    wm = _step({}, T0, (0, 10, "2026-11-22T11:30:00+00:00"), (1, 5, "2026-11-22T10:40:00+00:00"))
    # partition 1 stops moving; partition 0 advances
    later = T0 + IDLE
    wm = _step(wm, later, (0, 20, "2026-11-22T12:20:00+00:00"), (1, 5, None))
    ready = ready_time(wm, processing_time=later, idle_timeout=IDLE)
    assert ready.idle == (1,) and ready.holding == 0
    assert ready.time == "2026-11-22T12:10:00+00:00"
    # partition 1 resumes with older data: it holds the computed minimum again, but the ready
    # time never goes back below what was already declared
    resumed = later + timedelta(minutes=10)
    wm = _step(wm, resumed, (0, 20, None), (1, 9, "2026-11-22T11:00:00+00:00"))
    again = ready_time(wm, processing_time=resumed, idle_timeout=IDLE, previous=ready.instant)
    assert again.idle == () and again.holding == 1
    assert again.time == ready.time


def test_partition_without_any_event_holds_until_idle() -> None:
    wm = _step({}, T0, (0, 10, "2026-11-22T11:30:00+00:00"), (1, 0, None))
    assert ready_time(wm, processing_time=T0, idle_timeout=IDLE).time is None
    waiting = ready_time(wm, processing_time=T0, idle_timeout=IDLE)
    assert waiting.waiting_for_data == (1,) and waiting.holding == 1
    wm = _step(wm, T0 + IDLE, (0, 10, None), (1, 0, None))
    # now both are idle: everything sent has been read, the highest watermark counts
    ready = ready_time(wm, processing_time=T0 + IDLE, idle_timeout=IDLE)
    assert ready.all_idle and ready.time == "2026-11-22T11:20:00+00:00"


def test_no_partitions_no_ready_time() -> None:
    assert ready_time({}, processing_time=T0, idle_timeout=IDLE).time is None
