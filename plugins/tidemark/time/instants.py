"""Instants: tidemark's one rule for time zones of instants. A naive datetime is UTC (Spark
hands out session-zone UTC values, ``timestamp_ntz`` event times are UTC by tidemark's rule,
and an ISO string without an offset from a user means UTC); every other value keeps its zone.
"""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc(value: datetime) -> datetime:
    """``value`` as an aware instant in UTC (naive means UTC), always a plain ``datetime``:
    Airflow hands out pendulum ``DateTime`` subclasses, whose arithmetic with plain datetimes
    fails ("can't compare offset-naive and offset-aware datetimes")."""
    v = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, tzinfo=UTC)


def aware(value: datetime | None) -> datetime | None:
    """``value`` with its zone, or UTC when it has none; None stays None."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def parse_instant(text: str | None) -> datetime | None:
    """An ISO 8601 instant (naive means UTC); None for None or an empty string."""
    return aware(datetime.fromisoformat(text)) if text else None


def iso(value: datetime | None) -> str | None:
    """The ISO form of an instant, naive values read as UTC; None stays None."""
    instant = aware(value)
    return instant.isoformat() if instant is not None else None
