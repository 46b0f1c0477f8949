"""The clock an entry point hands a long-running job (the stream has no data interval)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from tidemark.time.instants import parse_instant


def stream_clock(clock_from: str) -> Callable[[], datetime]:
    """Each micro-batch's processing time: the stream has no data interval, so its entry point
    hands the library a clock (read once per micro-batch, recorded in its plan): the wall
    clock, or one running from ``clock_from`` (a replayed timeline: the demo, tests)."""
    if not clock_from:
        return lambda: datetime.now(UTC)
    origin, started = parse_instant(clock_from), time.monotonic()
    assert origin is not None
    return lambda: origin + timedelta(seconds=time.monotonic() - started)
