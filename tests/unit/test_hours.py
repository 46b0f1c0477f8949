"""Hour partitions across DST: 25-hour and 23-hour days, labels, keys and ordering."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from tidemark.seal.rebuild_plan import hours_between
from tidemark.time.hours import HourKeyError, hour_of, hours_from, parse_key, parse_path

pytestmark = pytest.mark.unit

NY = "America/New_York"


def _day(zone: str, day: str) -> list[str]:
    """Keys of every hour partition whose local date is ``day``."""
    start = hour_of(datetime.fromisoformat(f"{day}T00:00:00").replace(tzinfo=UTC) - timedelta(hours=14), zone)
    keys = [h.key for h in hours_from(start, ending_by=start.start + timedelta(hours=60))]
    return [k for k in keys if k.startswith(day)]


def test_fall_back_day_has_25_partitions_with_the_repeated_hour_marked() -> None:
    keys = _day(NY, "2026-11-01")
    assert len(keys) == 25
    assert keys[:4] == ["2026-11-01T00", "2026-11-01T01", "2026-11-01T01b", "2026-11-01T02"]
    assert keys == sorted(keys)  # labels sort in time order


def test_spring_forward_day_has_23_partitions() -> None:
    keys = _day(NY, "2026-03-08")
    assert len(keys) == 23
    assert "2026-03-08T02" not in keys


def test_utc_day_has_24_partitions_and_half_hour_zones_work() -> None:
    assert len(_day("UTC", "2026-11-22")) == 24
    hour = hour_of(datetime(2026, 11, 22, 4, 45, tzinfo=UTC), "Asia/Kolkata")  # 10:15 local
    assert hour.key == "2026-11-22T10"
    assert hour.start == datetime(2026, 11, 22, 4, 30, tzinfo=UTC)


def test_repeated_hour_instants_map_to_distinct_partitions() -> None:
    first = hour_of(datetime(2026, 11, 1, 5, 30, tzinfo=UTC), NY)  # 01:30 EDT
    second = hour_of(datetime(2026, 11, 1, 6, 30, tzinfo=UTC), NY)  # 01:30 EST
    assert (first.dt, first.hr, second.hr) == ("2026-11-01", "01", "01b")
    assert first.end == second.start and first < second
    assert second.path == "dt=2026-11-01/hr=01b"


@pytest.mark.parametrize("key", ["2026-11-01T01", "2026-11-01T01b", "2026-11-22T23", "2026-03-08T03"])
def test_keys_round_trip(key: str) -> None:
    hour = parse_key(key, NY)
    assert hour.key == key
    assert parse_path(hour.path, NY) == hour


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("2026-03-08T02", "does not exist"),  # skipped by spring-forward
        ("2026-11-22T10b", "does not exist"),  # not a repeated hour
        ("2026-11-22 10", "expected YYYY-MM-DDTHH"),
        ("2026-02-30T10", "day is out of range"),
    ],
)
def test_bad_keys_are_rejected_with_a_reason(key: str, message: str) -> None:
    with pytest.raises(HourKeyError, match=message):
        parse_key(key, NY)


@pytest.mark.parametrize(
    ("zone", "start"),
    [
        ("Australia/Lord_Howe", datetime(2026, 4, 4, 12, tzinfo=UTC)),  # clocks back 30 minutes
        ("Australia/Lord_Howe", datetime(2026, 10, 3, 13, tzinfo=UTC)),  # clocks forward 30 minutes
        ("Europe/Berlin", datetime(2026, 10, 24, 22, tzinfo=UTC)),
    ],
)
def test_half_hour_dst_zones_have_consecutive_hours_that_never_overlap(zone: str, start: datetime) -> None:
    hours = list(hours_from(hour_of(start, zone), ending_by=start + timedelta(hours=8)))
    assert len(hours) >= 6
    for before, after in itertools.pairwise(hours):
        assert before.end == after.start and before.key < after.key
        assert parse_key(before.key, zone) == before
    instant = start
    while instant < hours[-1].end:
        hour = hour_of(instant, zone)
        assert hour.start <= instant < hour.end
        instant += timedelta(minutes=10)
    if zone == "Australia/Lord_Howe" and start.month == 4:
        assert [h.key for h in hours][2:4] == ["2026-04-05T01", "2026-04-05T01b"]


def test_hours_of_airflow_pendulum_instants() -> None:
    """Airflow's data intervals are pendulum DateTimes: hour arithmetic must not mix them with
    plain datetimes (it raised "can't compare offset-naive and offset-aware datetimes")."""
    import pendulum

    start = pendulum.datetime(2026, 11, 23, 10, tz="UTC")
    hours = hours_between(start, start.add(hours=3), "Europe/Berlin")
    assert [h.key for h in hours] == ["2026-11-23T11", "2026-11-23T12", "2026-11-23T13"]
    assert hours[0].next() == hours[1] and type(hours[0].start) is datetime
