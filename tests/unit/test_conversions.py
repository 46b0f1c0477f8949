"""Declared conversions (source.conversions) of JSON messages: epoch numbers, formatted times in
a zone, numbers sent as strings. Each good row is checked against its offset; a value that does
not convert is a dirty type_mismatch naming the field; a conversion that cannot hold for its
column is refused when the config loads; conversions are part of the recorded schema version."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.classify import block, event, events_config, spec_of
from tidemark.errors import ConfigError
from tidemark.evolution import SchemaHistory
from tidemark.ingest.classify import Classifier

pytestmark = pytest.mark.unit

T = datetime(2026, 11, 22, 10, 15, tzinfo=UTC)
MILLIS = int(T.timestamp() * 1000)


def classify(
    config: Any, values: Sequence[bytes | None]
) -> tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    classified = Classifier(spec_of(config)).classify(block(values))
    good = {r["_mq_offset"]: r for r in classified.good.to_pylist()}
    dirty = {r["mq_offset"]: r for r in classified.dirty.to_pylist()}
    return good, dirty


def test_epoch_numbers_become_timestamps_and_a_bad_one_is_dirty_naming_the_field() -> None:
    for unit, value in (
        ("epoch_millis", MILLIS),
        ("epoch_seconds", MILLIS / 1000),
        ("epoch_micros", MILLIS * 1000),
    ):
        config = events_config(source__conversions={"event_time": {"from": unit}})
        values = [
            event(event_id="a", event_time=value),
            event(event_id="b", event_time=value + 1),
            event(event_id="iso", event_time="2026-11-22T10:15:00Z"),  # a string is not an epoch
            event(event_id="huge", event_time=1e300),
            event(event_id="c", event_time=value),
        ]
        good, dirty = classify(config, values)
        assert [good[o]["event_id"] for o in sorted(good)] == ["a", "b", "c"], unit
        assert good[100]["event_time"] == T and good[104]["event_time"] == T
        assert (good[100]["dt"], good[100]["hr"]) == ("2026-11-22", "10")
        assert {o: (d["reason"], d["detail"]) for o, d in dirty.items()} == {
            102: ("type_mismatch", "fields=event_time"),
            103: ("type_mismatch", "fields=event_time"),
        }, unit
    seconds = events_config(source__conversions={"event_time": {"from": "epoch_seconds"}})
    good, _ = classify(seconds, [event(event_time=MILLIS / 1000 + 0.25)])
    assert good[100]["event_time"] == T.replace(microsecond=250_000)  # fractions kept


def test_formatted_times_in_a_zone_and_numbers_sent_as_strings() -> None:
    config = events_config(
        source__conversions={
            "event_time": {"from": "text", "format": "%d/%m/%Y %H:%M", "zone": "Europe/Paris"},
            "user_id": {"from": "text"},
            "amount": {"from": "text"},
        }
    )
    values = [
        event(event_id="a", event_time="22/11/2026 11:15", user_id="42", amount="12.50"),
        event(event_id="bad-time", event_time="2026-11-22T10:15:00Z", user_id="1"),
        event(event_id="bad-number", event_time="22/11/2026 11:15", user_id="4x2"),
        event(event_id="number-not-string", event_time="22/11/2026 11:15", user_id=42),
        event(event_id="b", event_time="22/11/2026 11:15", user_id="-7", amount="0.01"),
    ]
    good, dirty = classify(config, values)
    assert [good[o]["event_id"] for o in sorted(good)] == ["a", "b"]
    assert good[100]["event_time"] == T  # 11:15 in Paris is 10:15 UTC
    assert (good[100]["user_id"], good[100]["amount"]) == (42, Decimal("12.50"))
    assert (good[104]["user_id"], good[104]["amount"]) == (-7, Decimal("0.01"))
    assert {o: (d["reason"], d["detail"]) for o, d in dirty.items()} == {
        101: ("type_mismatch", "fields=event_time"),
        102: ("type_mismatch", "fields=user_id"),
        103: ("type_mismatch", "fields=user_id"),
    }


def test_a_date_from_a_formatted_string() -> None:
    config = events_config(
        schema__day="date", source__conversions={"day": {"from": "text", "format": "%d.%m.%Y"}}
    )
    good, dirty = classify(config, [event(day="22.11.2026"), event(day="2026-11-22")])
    assert good[100]["day"] == date(2026, 11, 22)
    assert dirty[101]["detail"] == "fields=day"


@pytest.mark.parametrize(
    ("conversions", "problem"),
    [
        (
            {"amount": {"from": "epoch_millis"}},
            "epoch_millis gives a timestamp, but 'amount' is decimal(12,2)",
        ),
        ({"app": {"from": "text"}}, "a number as a string, but 'app' is string"),
        ({"user_id": {"from": "text", "format": "%Y"}}, "a formatted time gives a timestamp or date"),
        (
            {"event_time": {"from": "text", "format": "%Y", "zone": "Mars/Base"}},
            "unknown time zone 'Mars/Base'",
        ),
        ({"nope": {"from": "epoch_millis"}}, "'nope' is not a column of the schema"),
        ({"event_time": {"from": "epoch_nanos"}}, "source.conversions"),
    ],
)
def test_a_conversion_that_cannot_hold_is_refused_when_the_config_loads(
    conversions: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ConfigError, match=r"source\.conversions") as raised:
        events_config(source__conversions=conversions)
    assert problem in str(raised.value)


def test_conversions_are_part_of_the_schema_version_and_a_rebuild_decodes_with_its_own(
    tmp_path: Path,
) -> None:
    history = SchemaHistory(tmp_path, "events")
    iso = events_config()
    epoch = events_config(source__conversions={"event_time": {"from": "epoch_millis"}})
    assert history.ensure(iso, "r1").version == 1
    second = history.ensure(epoch, "r2")
    assert second.version == 2 and second.changes == ("column 'event_time': conversion none -> epoch_millis",)
    old_batch = history.config_at(epoch, 1)  # a batch planned under version 1 is re-read as ISO strings
    good, _ = classify(old_batch, [event(event_time="2026-11-22T10:15:00Z")])
    assert good[100]["event_time"] == T
    assert history.config_at(iso, 2).source.conversions == epoch.source.conversions
