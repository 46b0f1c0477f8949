"""Helpers of the classification tests: the events table, a spec as executors get it, blocks
of raw records and event messages."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
    import yaml

    data = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    for dotted, value in changes.items():
        target = data
        *parents, last = dotted.split("__")
        for key in parents:
            target = target[key]
        target[last] = value
    return parse_table(data, "events.yaml")


def spec_of(config: TableConfig, sealed_through: datetime | None = None) -> ClassifySpec:
    spec = ClassifySpec.of(
        config,
        topic="t",
        batch_id=4,
        run_id="run-4",
        processing_time=PROCESSING,
        sealed_through=sealed_through,
    )
    return ClassifySpec.from_json(spec.to_json())  # as the executors get it


def block(values: Sequence[bytes | None], partition: int = 2) -> RawRecords:
    n = len(values)
    return RawRecords(partition, list(range(100, 100 + n)), [0] * n, [b"k"] * n, list(values))


def event(**changes: Any) -> bytes:
    record = {**GOOD, **changes}
    return json.dumps({k: v for k, v in record.items() if v is not ...}).encode()
