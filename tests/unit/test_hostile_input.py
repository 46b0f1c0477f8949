"""One message is one record or one dirty record, never another message's content: a corpus of
hostile messages, each beside good ones, classified in one block (the fast path) and alone.
Content is checked against offsets: every good row carries the event id produced at its own
offset."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.helpers.classify import HOSTILE, block, event, events_config, spec_of
from tidemark.ingest.classify import Classifier
from tidemark.time.hours import hour_of

pytestmark = pytest.mark.unit


def corpus() -> tuple[list[bytes | None], dict[int, str | None], dict[int, str]]:
    """Good, hostile, good, ... with the expected reason of each hostile offset and the
    event id of each good one (offsets start at 100)."""
    values: list[bytes | None] = []
    expected: dict[int, str | None] = {}
    ids: dict[int, str] = {}
    for i, (_, value, reason) in enumerate(HOSTILE):
        good_id = f"g{i}"
        ids[100 + len(values)] = good_id
        values.append(event(event_id=good_id))
        expected[100 + len(values)] = reason
        values.append(value)
    ids[100 + len(values)] = "last"
    values.append(event(event_id="last"))
    return values, expected, ids


def verdicts(values: list[bytes | None]) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    config = events_config()
    classified = Classifier(spec_of(config)).classify(block(values))
    good = {r["_mq_offset"]: r for r in classified.good.to_pylist()}
    dirty = {r["mq_offset"]: r for r in classified.dirty.to_pylist()}
    return good, dirty


def test_every_hostile_message_is_exactly_one_verdict_and_good_rows_keep_their_content() -> None:
    values, expected, ids = corpus()
    good, dirty = verdicts(values)
    assert set(good) | set(dirty) == set(range(100, 100 + len(values))) and not set(good) & set(dirty)
    for offset, event_id in ids.items():  # content against offset, not only counts
        assert offset in good, (offset, dirty.get(offset))
        assert good[offset]["event_id"] == event_id
    for (name, _, reason), offset in zip(HOSTILE, sorted(expected), strict=True):
        if reason is None:
            assert offset in good, (name, dirty.get(offset))
        else:
            assert offset in dirty, (name, good.get(offset))
            assert dirty[offset]["reason"] == reason, (name, dirty[offset]["reason"], dirty[offset]["detail"])
            assert dirty[offset]["raw_value"] == values[offset - 100]


@pytest.mark.parametrize(("name", "value", "reason"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_each_hostile_message_gets_the_same_verdict_alone(
    name: str, value: bytes | None, reason: str | None
) -> None:
    good, dirty = verdicts([value])
    assert (dirty[100]["reason"] if dirty else None) == reason, (name, dirty)
    assert bool(good) == (reason is None)


def test_the_black_box_sequence_two_objects_good_empty_good() -> None:
    two = HOSTILE[0][1]
    assert two is not None
    values: list[bytes | None] = [two, event(event_id="a"), b"", event(event_id="b")]
    values += [event(event_id=f"c{i}") for i in range(60)]
    good, dirty = verdicts(values)
    assert sorted(dirty) == [100, 102]
    assert {o: r["event_id"] for o, r in good.items()} == {
        101: "a",
        103: "b",
        **{104 + i: f"c{i}" for i in range(60)},
    }


def test_pre_1970_instants_get_their_own_hour() -> None:
    good, _ = verdicts([event(event_time="1969-12-31T23:59:30Z"), event(event_time="1970-01-01T00:00:30Z")])
    labels = [(r["dt"], r["hr"]) for _, r in sorted(good.items())]
    assert labels == [("1969-12-31", "23"), ("1970-01-01", "00")]
    assert hour_of(datetime(1969, 12, 31, 23, 59, 30, tzinfo=UTC), "UTC").key == "1969-12-31T23"


def test_records_older_than_max_event_age_are_dirty_or_late_by_policy() -> None:
    old, fresh = event(event_time="2026-11-01T10:00:00Z"), event(event_time="2026-11-22T10:00:00Z")
    config = events_config(watermark__max_event_age="7d")
    classified = Classifier(spec_of(config)).classify(block([old, fresh]))
    (dirty,) = classified.dirty.to_pylist()
    assert dirty["reason"] == "event_time_too_old" and dirty["mq_offset"] == 100
    as_late = events_config(watermark__max_event_age="7d", watermark__too_old="late")
    good = Classifier(spec_of(as_late)).classify(block([old, fresh])).good.to_pylist()
    assert [(r["_mq_offset"], r["_late"]) for r in good] == [(100, True), (101, False)]
