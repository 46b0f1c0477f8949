"""Helpers of the classification tests: the events table, a spec as executors get it, blocks
of raw records and event messages."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tidemark.config import TableConfig, parse_table
from tidemark.ingest.spec import ClassifySpec, RawRecords

ROOT = Path(__file__).resolve().parents[2]
PROCESSING = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
GOOD = {
    "event_id": "e1",
    "user_id": 7,
    "app": "web",
    "event_type": "click",
    "amount": "12.50",
    "event_time": "2026-11-22T10:15:00Z",
}


def events_config(tmp_path: Path | None = None, **changes: Any) -> TableConfig:
    return example_config("events", **changes)


def example_config(template: str, **changes: Any) -> TableConfig:
    """A conf/tables example with ``changes`` (``section__key=value``) applied."""

    data = yaml.safe_load((ROOT / "conf" / "tables" / f"{template}.yaml").read_text())
    for dotted, value in changes.items():
        target = data
        *parents, last = dotted.split("__")
        for key in parents:
            target = target.setdefault(key, {})
        target[last] = value
    return parse_table(data, f"{template}.yaml")


def spec_of(config: TableConfig, sealed_through: datetime | None = None) -> ClassifySpec:
    spec = ClassifySpec.of(
        config,
        topic="t",
        batch_id=4,
        run_id="run-4",
        clock=PROCESSING,
        sealed_through=sealed_through,
    )
    return ClassifySpec.from_json(spec.to_json())  # as the executors get it


def block(values: Sequence[bytes | None], partition: int = 2) -> RawRecords:
    n = len(values)
    return RawRecords(partition, list(range(100, 100 + n)), [0] * n, [b"k"] * n, list(values))


def event(**changes: Any) -> bytes:
    record = {**GOOD, **changes}
    return json.dumps({k: v for k, v in record.items() if v is not ...}).encode()


# (name, message, expected dirty reason or None for a good row), each a class of hostile input
HOSTILE: list[tuple[str, bytes | None, str | None]] = [
    (
        "two objects",
        b'{"event_id":"x1","event_type":"a","event_time":"2026-11-22T10:00:00Z"}'
        b'{"event_id":"x2","event_type":"a","event_time":"2026-11-22T10:00:00Z"}',
        "invalid_json",
    ),
    (
        "two objects, spaced",
        b'{"event_id":"x1","event_type":"a","event_time":"2026-11-22T10:00:00Z"} '
        b'{"event_id":"x2","event_type":"a","event_time":"2026-11-22T10:00:00Z"}',
        "invalid_json",
    ),
    ("empty", b"", "invalid_json"),
    ("blank", b"  \t ", "invalid_json"),
    ("trailing data", event()[:-1] + b"} trailing", "invalid_json"),
    (
        "invalid UTF-8 in a string",
        event(event_type="caf\udcc3").replace(b"\\udcc3", b"\xc3\x28"),
        "invalid_json",
    ),
    ("invalid UTF-8 outside", b"\xff" + event(), "invalid_json"),
    ("raw NUL in a string", event(event_type="a").replace(b'"a"', b'"a\x00b"'), "invalid_json"),
    ("NaN", event().replace(b'"amount": "12.50"', b'"amount": NaN'), "invalid_json"),
    ("-Infinity", event().replace(b'"user_id": 7', b'"user_id": -Infinity'), "invalid_json"),
    ("deep nesting", event()[:-1] + b', "deep": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", None),
    ("deep nesting, unclosed", event()[:-1] + b', "deep": ' + b"[" * 100_000 + b"}", "invalid_json"),
    ("null value (tombstone)", None, "tombstone"),
    ("JSON null", b"null", "invalid_json"),
    ("array", b"[1, 2]", "invalid_json"),
    ("string", b'"event"', "invalid_json"),
    ("number too big", event(user_id=10**30), "type_mismatch"),
    ("double out of range", event().replace(b'"user_id": 7', b'"user_id": 1e400'), "type_mismatch"),
    ("duplicate key", event()[:-1] + b', "event_id": "dup"}', "invalid_json"),
    ("year 0001", event(event_time="0001-01-01T00:00:00Z"), "event_time_out_of_range"),
    ("year 1899", event(event_time="1899-12-31T23:59:59Z"), "event_time_out_of_range"),
    ("year 9999", event(event_time="9999-12-31T23:59:59Z"), "future_event_time"),
    ("pretty printed", json.dumps({**GOOD, "event_id": "pretty"}, indent=2).encode(), None),
    ("escaped NUL", event(event_type="a\u0000b"), None),
    ("non-ASCII", event(event_type="café ☕"), None),
    ("pre-1970", event(event_time="1969-12-31T23:59:30Z"), None),
]
