"""Reading table files under a newer schema through the pyarrow data source (object-store
warehouses): an older file lacks a column added since, or holds a narrower number type."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa  # noqa: TID253
import pytest

from tidemark.sparkfiles import conform  # noqa: TID253

pytestmark = pytest.mark.unit


def test_a_file_of_an_older_schema_reads_under_the_newer_one() -> None:
    old = pa.record_batch(
        {
            "user_id": pa.array([1, 2], pa.int32()),
            "amount": pa.array([Decimal("1.50"), None], pa.decimal128(5, 2)),
            "event_time": pa.array(
                [datetime(2026, 11, 22, 10, tzinfo=UTC)] * 2, pa.timestamp("us", tz="UTC")
            ),
        }
    )
    target = pa.schema(
        [
            ("user_id", pa.int64()),
            ("amount", pa.decimal128(12, 2)),
            ("score", pa.float64()),  # added since the file was written
            ("event_time", pa.timestamp("us", tz="UTC")),
        ]
    )
    read = conform(old, target)
    assert read.schema == target
    assert read.to_pydict() == {
        "user_id": [1, 2],
        "amount": [Decimal("1.50"), None],
        "score": [None, None],
        "event_time": [datetime(2026, 11, 22, 10, tzinfo=UTC)] * 2,
    }
    assert conform(read, target).equals(read)  # a file of the current schema passes unchanged
