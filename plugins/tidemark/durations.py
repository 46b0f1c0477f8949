"""Human durations and sizes used in table YAML files ("10m", "1h30m", "128MB")."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from pydantic import BeforeValidator

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_HINT = "a duration such as '30s', '10m', '1h' or '1h30m' (units: ms, s, m, h, d)"

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(b|kb|kib|mb|mib|gb|gib)?", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "kb": 1000,
    "kib": 1024,
    "mb": 1000**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "gib": 1024**3,
}
SIZE_HINT = "a size such as '512KiB', '128MB' or '1GiB', or a number of bytes"


def parse_duration(value: object) -> timedelta:
    """Parse ``"1h30m"``-style text (or a timedelta, or plain seconds) into a timedelta.

    Raises ValueError with the expected form, so config errors say what to write instead.
    """
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"expected {DURATION_HINT}, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"expected a non-negative duration, got {value!r}")
        return timedelta(seconds=value)
    if not isinstance(value, str):
        raise ValueError(f"expected {DURATION_HINT}, got {value!r}")
    text = value.strip().lower()
    pos, seconds = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if not text or pos != len(text):
        raise ValueError(f"expected {DURATION_HINT}, got {value!r}")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """Inverse of parse_duration for whole seconds: 5400 s -> '1h30m'."""
    total = int(delta.total_seconds())
    if total == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, total = divmod(total, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def parse_size(value: object) -> int:
    """Parse ``"128MB"``/``"1GiB"`` (or an int of bytes) into bytes."""
    if isinstance(value, bool):
        raise ValueError(f"expected {SIZE_HINT}, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"expected a positive size, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected {SIZE_HINT}, got {value!r}")
    match = _SIZE.fullmatch(value.strip())
    if not match:
        raise ValueError(f"expected {SIZE_HINT}, got {value!r}")
    size = int(float(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()])
    if size <= 0:
        raise ValueError(f"expected a positive size, got {value!r}")
    return size


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]  # a duration field of a config model
