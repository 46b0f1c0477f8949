"""Which batch files the seal adopts as they are: near the target size, and exactly what its
writer would write (Parquet schema with physical types, compression); and the link that
takes a file into a version without rewriting it."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa  # noqa: TID253
import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tidemark.seal.adoption import adopt, adoptable_rows
from tidemark.tableformat import TableFormat
from tidemark.tablefs import Store

pytestmark = pytest.mark.unit

SCHEMA = pa.schema([("event_id", pa.string()), ("event_time", pa.timestamp("us", tz="UTC"))])
HIVE = TableFormat("parquet", "snappy", int96=True)


def _write(store: Store, relative: str, rows: int, fmt: TableFormat | None = HIVE) -> int:
    table = pa.table(
        {
            "event_id": [f"e-{i}" for i in range(rows)],
            "event_time": [datetime(2026, 11, 22, 10, tzinfo=UTC)] * rows,
        },
        schema=SCHEMA,
    )
    store.write_table(relative, table, fmt)
    return store.size(relative)


def _rows(
    store: Store, inputs: list[str], fmt: TableFormat = HIVE, target: int | None = None
) -> list[int] | None:
    sizes = [store.size(r) for r in inputs]
    return adoptable_rows(store, inputs, sizes, schema=SCHEMA, fmt=fmt, target_size=target or max(sizes))


def test_files_near_the_target_in_the_tables_format_are_adopted(tmp_path: Path) -> None:
    store = Store.of(str(tmp_path))
    size = _write(store, "t/_open/h/a.parquet", 300)
    _write(store, "t/_open/h/b.parquet", 250)
    assert _rows(store, ["t/_open/h/a.parquet", "t/_open/h/b.parquet"], target=size) == [300, 250]
    # far from the target either way: rewritten (compacted, or split as the target asks)
    assert _rows(store, ["t/_open/h/a.parquet"], target=size * 3) is None
    assert _rows(store, ["t/_open/h/a.parquet"], target=size // 2) is None


def test_files_the_seal_would_write_otherwise_are_not_adopted(tmp_path: Path) -> None:
    store = Store.of(str(tmp_path))
    _write(store, "plain.parquet", 300, None)  # pyarrow's default: INT64 timestamps
    assert _rows(store, ["plain.parquet"]) is None
    assert _rows(store, ["plain.parquet"], fmt=TableFormat("parquet", "snappy", int96=False)) == [300]
    _write(store, "zstd.parquet", 300, TableFormat("parquet", "zstd", int96=True))
    assert _rows(store, ["zstd.parquet"]) is None
    assert _rows(store, ["zstd.parquet"], fmt=TableFormat("parquet", "zstd", int96=True)) == [300]
    assert _rows(store, ["zstd.parquet"], fmt=TableFormat("orc", "zstd")) is None  # an ORC table: never


def test_a_file_of_an_older_schema_is_not_adopted(tmp_path: Path) -> None:
    store = Store.of(str(tmp_path))
    old = pa.table({"event_id": ["e-1"] * 100}, schema=pa.schema([("event_id", pa.string())]))
    store.write_table("old.parquet", old, HIVE)
    assert _rows(store, ["old.parquet"]) is None


def test_adopted_files_are_the_same_files_under_sealed_names(tmp_path: Path) -> None:
    store = Store.of(str(tmp_path))
    _write(store, "t/_open/h/a.parquet", 10)
    _write(store, "t/_open/h/b.parquet", 20)
    (tmp_path / "t/h/_versions/v1").mkdir(parents=True)
    (tmp_path / "t/h/_versions/v1/part-00001.parquet").write_bytes(b"a crashed attempt's")
    written = adopt(
        store,
        [("t/_open/h/a.parquet", 10), ("t/_open/h/b.parquet", 20)],
        "t/h/_versions/v1",
        prefix="part",
        suffix=".parquet",
    )
    assert written == [
        ("t/h/_versions/v1/part-00000.parquet", 10),
        ("t/h/_versions/v1/part-00001.parquet", 20),
    ]
    for (source, _), (target, rows) in zip(
        [("t/_open/h/a.parquet", 0), ("t/_open/h/b.parquet", 0)], written, strict=True
    ):
        assert os.stat(tmp_path / source).st_ino == os.stat(tmp_path / target).st_ino
        assert pq.ParquetFile(tmp_path / target).metadata.num_rows == rows
    (tmp_path / "t/_open/h/a.parquet").unlink()  # the batch files dropped after the seal
    assert pq.ParquetFile(tmp_path / "t/h/_versions/v1/part-00000.parquet").metadata.num_rows == 10
    assert sorted(p.name for p in (tmp_path / "t/h/_versions/v1").iterdir()) == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]


@pytest.mark.parametrize("compression", ["snappy", "zstd", "lz4", "gzip", "none"])
def test_every_parquet_compression_adopts_its_own_files(tmp_path: Path, compression: str) -> None:
    """The footer's codec label for each ``output.compression`` (``none``: UNCOMPRESSED) is
    the one the seal's writer gives, so no codec is rewritten for its label alone."""
    store = Store.of(str(tmp_path))
    fmt = TableFormat("parquet", compression, int96=True)
    _write(store, "batch.parquet", 300, fmt)
    assert _rows(store, ["batch.parquet"], fmt=fmt) == [300]
