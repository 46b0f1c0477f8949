from __future__ import annotations

from datetime import timedelta

import pytest

from tidemark.durations import format_duration, parse_duration, parse_size

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10m", timedelta(minutes=10)),
        ("1h", timedelta(hours=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("250ms", timedelta(milliseconds=250)),
        ("2d", timedelta(days=2)),
        ("0s", timedelta(0)),
        (90, timedelta(seconds=90)),
    ],
)
def test_parse_duration_accepts(text: object, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["10 minutes", "", "m10", "1h 30", "-5m", "1.5", True, None, [1]])
def test_parse_duration_rejects_with_hint(text: object) -> None:
    with pytest.raises(ValueError, match="expected a"):
        parse_duration(text)


def test_format_duration_round_trips() -> None:
    for text in ["1h30m", "5m", "1d2h", "45s"]:
        assert format_duration(parse_duration(text)) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [("128MB", 128_000_000), ("1GiB", 1024**3), ("512 KiB", 512 * 1024), ("4096", 4096), (10, 10)],
)
def test_parse_size(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["12 parsecs", "-1", 0, "", True])
def test_parse_size_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        parse_size(text)
