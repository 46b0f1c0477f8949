"""Table files through pyarrow alone: an older file read under a newer schema (it lacks a
column added since, or holds a narrower number type), and an hour's files written in whole
row groups, one file per extra partition value."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa  # noqa: TID253
import pyarrow.orc as orc  # noqa: TID253
import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tidemark import arrowfiles
from tidemark.arrowfiles import PartitionedFiles, conform
from tidemark.tableformat import TableFormat
from tidemark.tablefs import Store

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


def _batch(start: int, rows: int, app: str) -> pa.RecordBatch:
    return pa.record_batch({"n": pa.array(range(start, start + rows), pa.int64()), "app": [app] * rows})


def test_an_hours_batches_are_written_as_whole_row_groups(tmp_path: Path) -> None:
    files = PartitionedFiles(
        Store.of(str(tmp_path)), "dt=2026-11-22/hr=10", "part.parquet", (), TableFormat("parquet")
    )
    for k in range(10):
        files.write(_batch(k * 100, 100, "web"))
    assert files.close() == [("dt=2026-11-22/hr=10/part.parquet", 1000)]
    written = pq.ParquetFile(tmp_path / "dt=2026-11-22/hr=10/part.parquet")
    assert written.num_row_groups == 1  # not one per batch
    assert written.read().column("n").to_pylist() == list(range(1000))


def test_the_held_batches_are_written_each_time_they_reach_the_row_group_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each write holds 250 int64 values for each of the two files: 4000 bytes
    monkeypatch.setattr(arrowfiles, "ROW_GROUP_BYTES", 8000)
    files = PartitionedFiles(Store.of(str(tmp_path)), "h", "part.parquet", ("app",), TableFormat("parquet"))
    for k in range(8):
        files.write(pa.concat_batches([_batch(k * 500, 250, "web"), _batch(k * 500 + 250, 250, "ios")]))
    assert files.close() == [("h/app=ios/part.parquet", 2000), ("h/app=web/part.parquet", 2000)]
    for app in ("ios", "web"):
        written = pq.ParquetFile(tmp_path / f"h/app={app}/part.parquet")
        assert written.num_row_groups == 4  # both files written at every second write
        assert written.schema_arrow.names == ["n"]  # the partition column is in the path
        assert sorted(written.read().column("n").to_pylist()) == [
            n
            for k in range(8)
            for n in range(k * 500 + (250 if app == "ios" else 0), k * 500 + (500 if app == "ios" else 250))
        ]


def test_an_orc_hour_is_written_through_the_same_holding(tmp_path: Path) -> None:
    files = PartitionedFiles(Store.of(str(tmp_path)), "h", "part.orc", (), TableFormat("orc", "zlib"))
    for k in range(3):
        files.write(_batch(k * 10, 10, "web"))
    assert files.close() == [("h/part.orc", 30)]
    assert orc.ORCFile(str(tmp_path / "h/part.orc")).read().column("n").to_pylist() == list(range(30))
