"""Hour partitions in a table's time zone, correct across DST changes.

An hour partition is identified by the UTC instant it starts at; its label is the local date
and hour (``dt``, ``hr``). On a fall-back day the repeated local hour exists twice: the first
(daylight) occurrence is ``hr=01``, the second (standard time) ``hr=01b``, so a 25-hour day has
25 partitions, labels sort in time order and no partition ever spans two hours. On a
spring-forward day the skipped hour simply has no partition (a 23-hour day).

The rule exists once: routing rows applies :func:`hour_of` to each distinct minute of a block
(``transform.Classifier``), as do sealing, status and Asset keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import total_ordering
from zoneinfo import ZoneInfo

from tidemark.time.instants import as_utc

HOUR = timedelta(hours=1)
REPEATED_SUFFIX = "b"
_KEY = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2})(b?)$")


class HourKeyError(ValueError):
    """A partition key that names no hour of the table's zone."""


@total_ordering
@dataclass(frozen=True)
class Hour:
    """One hour partition: ``start`` is a UTC instant on a local hour boundary."""

    start: datetime
    zone: str = field(compare=False)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Hour):
            return NotImplemented
        return self.start < other.start

    @property
    def end(self) -> datetime:
        """The next hour's start: one hour later, or sooner where a zone's clocks move by half
        an hour (``Australia/Lord_Howe``): such an hour is shorter, never overlapping."""
        following = _start_of(self.start + HOUR, ZoneInfo(self.zone))
        return following if following > self.start else self.start + HOUR

    @property
    def _local(self) -> datetime:
        return self.start.astimezone(ZoneInfo(self.zone))

    @property
    def dt(self) -> str:
        return self._local.strftime("%Y-%m-%d")

    @property
    def hr(self) -> str:
        local = self._local
        return local.strftime("%H") + (REPEATED_SUFFIX if local.fold else "")

    @property
    def key(self) -> str:
        """The partition key of Asset events and ``status --hour``: ``2026-11-22T10``."""
        return f"{self.dt}T{self.hr}"

    @property
    def path(self) -> str:
        return hour_path(self.dt, self.hr)

    @property
    def spec(self) -> dict[str, str]:
        return {"dt": self.dt, "hr": self.hr}

    def next(self) -> Hour:
        return hour_of(self.end, self.zone)

    def __str__(self) -> str:
        return f"{self.key} [{self.start.isoformat()} .. {self.end.isoformat()})"


def hour_path(dt: str, hr: str) -> str:
    """``dt=2026-11-22/hr=10``: an hour's directory under a table, and its key in the commit
    log's per-hour counts (the one place this spelling is written)."""
    return f"dt={dt}/hr={hr}"


def split_hour_path(path: str) -> tuple[str, str]:
    """``dt=2026-11-22/hr=10`` (possibly followed by more levels) -> ``("2026-11-22", "10")``."""
    parts = dict(p.split("=", 1) for p in path.strip("/").split("/")[:2])
    return parts["dt"], parts["hr"]


def hour_of(instant: datetime, zone: str) -> Hour:
    """The hour partition an instant falls into (naive instants are UTC)."""
    return Hour(_start_of(as_utc(instant), ZoneInfo(zone)), zone)


def _start_of(instant: datetime, tz: ZoneInfo) -> datetime:
    """The UTC start of the local hour holding ``instant``: its local wall-clock hour, or the
    last change of UTC offset after it (a clock set back by half an hour repeats only half an
    hour, which is then an hour partition of its own, ``hr=01b``)."""
    local = instant.astimezone(tz)
    start = local.replace(minute=0, second=0, microsecond=0).astimezone(UTC)
    if instant - start < HOUR:
        return start
    low, high = start, instant  # the offset changes once in between: find it to the minute
    while high - low > timedelta(minutes=1):
        middle = low + (high - low) / 2
        if middle.astimezone(tz).utcoffset() == local.utcoffset():
            high = middle
        else:
            low = middle
    return high.replace(second=0, microsecond=0)


def parse_key(key: str, zone: str) -> Hour:
    """``2026-11-22T10`` (or ``2026-11-01T01b``) -> the Hour, validated against the zone."""
    match = _KEY.match(key.strip())
    if not match:
        raise HourKeyError(f"partition {key!r}: expected YYYY-MM-DDTHH (e.g. 2026-11-22T10)")
    day, hh, repeated = match.groups()
    try:
        naive = datetime.fromisoformat(f"{day}T{hh}:00:00")
    except ValueError as exc:
        raise HourKeyError(f"partition {key!r}: {exc}") from None
    local = naive.replace(tzinfo=ZoneInfo(zone), fold=1 if repeated else 0)
    hour = hour_of(local.astimezone(UTC), zone)
    if hour.key != key.strip() and repeated and hour.next().key == key.strip():
        hour = hour.next()  # a half-hour repeat (Lord_Howe): the repeated part follows the hour
    if hour.key != key.strip():
        raise HourKeyError(f"partition {key!r} does not exist in time zone {zone} (nearest: {hour.key})")
    return hour


def parse_path(path: str, zone: str) -> Hour:
    """``dt=2026-11-22/hr=10`` -> the Hour."""
    dt, hr = split_hour_path(path)
    return parse_key(f"{dt}T{hr}", zone)


def hours_from(first: Hour, *, ending_by: datetime) -> Iterator[Hour]:
    """Consecutive hours from ``first`` whose end is <= ``ending_by``."""
    hour = first
    while hour.end <= ending_by:
        yield hour
        hour = hour.next()
