"""Table files written and conformed by pyarrow alone: an hour's files under Hive's
``col=value/`` directories, and record batches cast to a table's columns. Apart from
``sparkfiles`` so that a seal compacting in its driver never imports pyspark (~0.2 s) for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tidemark.tableformat import TableFormat
from tidemark.tablefs import Store

if TYPE_CHECKING:
    import pyarrow as pa


def path_values(uri: str) -> dict[str, str]:
    """The Hive partition values a file's directories name (``dt=2026-11-22/app=web/``)."""
    directories = uri.split("/")[:-1]
    return dict(part.split("=", 1) for part in directories if "=" in part and not part.startswith("_"))


def conform(
    batch: pa.RecordBatch, target: pa.Schema, values: dict[str, str] | None = None, *, exact: bool = False
) -> pa.RecordBatch:
    """``batch`` with ``target``'s columns in order: missing ones from the path's partition
    ``values`` or null, other number types cast. Timestamps are passed as stored for Spark (its
    zone handling), or with ``exact`` cast too, for a file pyarrow writes itself: a timestamp
    Spark stored as INT96 reads as naive nanoseconds in UTC, and becomes ``target``'s type."""
    import pyarrow as pa

    arrays = []
    for field in target:
        if field.name not in batch.schema.names:
            if values and field.name in values:
                column = pa.array([values[field.name]] * batch.num_rows, pa.string())
                arrays.append(column.cast(field.type))
            else:
                arrays.append(pa.nulls(batch.num_rows, field.type))
            continue
        column = batch.column(field.name)
        same = column.type == field.type or (
            not exact and pa.types.is_timestamp(column.type) and pa.types.is_timestamp(field.type)
        )
        arrays.append(column if same else column.cast(field.type))
    if exact:
        return pa.RecordBatch.from_arrays(arrays, schema=target)
    return pa.RecordBatch.from_arrays(arrays, names=[f.name for f in target])


# Arrow bytes a PartitionedFiles holds before it writes them: each write is one row group or
# more, and a row group per 64K-row batch read made an hour's file a third bigger (a
# dictionary and statistics per group) and its write 60% slower than one group per ~64 MiB.
ROW_GROUP_BYTES = 64 * 1024 * 1024


class PartitionedFiles:
    """Record batches written into files under ``directory``, one file per value of
    ``partition_by`` in Hive's ``col=value/`` subdirectories (the columns are in the path, not
    the file, as Spark's ``partitionBy`` writes them), each named ``name``. Used inside a task:
    the files are open until ``close``, which returns (warehouse-relative path, rows) per file.
    Batches are held until ``ROW_GROUP_BYTES`` of them are, then written as whole row groups."""

    def __init__(
        self,
        store: Store,
        directory: str,
        name: str,
        partition_by: Sequence[str],
        fmt: TableFormat,
    ) -> None:
        self.store = store
        self.directory = directory
        self.name = name
        self.parts = list(partition_by)
        self.fmt = fmt
        self._open: dict[tuple[str, ...], tuple[Any, Any, str]] = {}  # values -> (out, writer, path)
        self._held: dict[tuple[str, ...], list[pa.RecordBatch]] = {}  # values -> batches not written
        self._held_bytes = 0
        self.rows: dict[str, int] = {}

    def write(self, batch: pa.RecordBatch) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        if batch.num_rows == 0:
            return
        parts = self.parts
        groups = pa.Table.from_batches([batch]).group_by(parts).aggregate([]).to_pylist() if parts else [{}]
        for group in groups:
            values = tuple(str(group[c]) for c in parts)
            piece = batch
            for column, value in group.items():
                piece = piece.filter(pc.equal(piece.column(column), value))
            data = piece.drop_columns(parts) if parts else piece
            if values not in self._open:
                below = "/".join(f"{c}={v}" for c, v in zip(parts, values, strict=True))
                relative = "/".join(x for x in (self.directory, below, self.name) if x)
                target = self.store.path(relative)
                self.store.make_parent(target)
                out = self.store.fs.open_output_stream(target)
                writer = self.fmt.arrow_writer(out, data.schema)
                self._open[values] = (out, writer, relative)
            relative = self._open[values][2]
            self._held.setdefault(values, []).append(data)
            self._held_bytes += data.nbytes
            self.rows[relative] = self.rows.get(relative, 0) + data.num_rows
        if self._held_bytes >= ROW_GROUP_BYTES:
            self._write_held()

    def _write_held(self) -> None:
        import pyarrow as pa

        for values, batches in self._held.items():
            self._open[values][1].write_table(pa.Table.from_batches(batches))
        self._held.clear()
        self._held_bytes = 0

    def close(self) -> list[tuple[str, int]]:
        try:
            self._write_held()
        finally:
            for out, writer, _ in self._open.values():
                writer.close()
                out.close()
            self._open.clear()
            self._held.clear()
        return sorted(self.rows.items())
