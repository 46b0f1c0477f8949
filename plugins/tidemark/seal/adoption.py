"""No rewrite of what is already right: an hour whose committed batch files are few and near
the target size becomes its version as they are.

The dump writes a Parquet table's rows in the table's sealed format (``tableformat.
batch_format``: its compression, INT96 timestamps for a Hive table). Where every batch file
of an hour is near ``output.target_file_size`` (``NEAR_TARGET``: half to one and a half
times it), and its footer says
it is exactly what the seal would write (the same Parquet schema, physical types included,
and the same compression), rewriting it would only cost CPU. The seal then takes each file
into the hour's version directory under a sealed name, without rewriting it
(``Store.link``: a hard link, or a server-side copy on S3). The version keeps every guarantee
of the versioned layout: the directory is claimed and marked complete as a compacted one is,
the batch files stay until ``drop_batch_files`` (so every crash point keeps its retry), and
the hour's default checks are judged by pyarrow over the check columns alone."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from tidemark.tableformat import TableFormat
from tidemark.tablefs import Store

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

# A batch file between these shares of the target size is "near" it: an hour of small files
# is always compacted (at most twice as many files as a rewrite would make), and a file well
# past the target is split by the rewrite, as the target asks
NEAR_TARGET = (0.5, 1.5)


def adoptable_rows(
    store: Store,
    inputs: list[str],
    sizes: list[int],
    *,
    schema: pa.Schema,
    fmt: TableFormat,
    target_size: int,
) -> list[int] | None:
    """The rows of each of an hour's batch files (warehouse-relative ``inputs``, of ``sizes``
    bytes) where the hour can be adopted as it is, else None: every file near the target
    size, and written as the seal writes (``fmt``, the hours' Arrow ``schema``). Not for a
    table with extra partition columns: its sealed files hold them in the path."""
    low, high = (share * target_size for share in NEAR_TARGET)
    if not inputs or fmt.name != "parquet" or not all(low <= size <= high for size in sizes):
        return None
    import pyarrow.parquet as pq

    reference = _reference_schema(schema, fmt)
    rows = []
    for relative in inputs:
        if not relative.endswith(fmt.suffix):
            return None
        with store.fs.open_input_file(store.path(relative)) as handle:
            metadata = pq.ParquetFile(handle).metadata
        if not metadata.schema.equals(reference) or not _compressed_as(metadata, fmt):
            return None
        rows.append(metadata.num_rows)
    return rows


@functools.cache
def _reference_schema(schema: pa.Schema, fmt: TableFormat) -> pq.ParquetSchema:
    """The Parquet schema the seal's writer gives a file of ``schema`` (an empty one, in
    memory, once per schema and format: a seal asks for every due hour): physical types (INT96
    or INT64), logical types and repetition."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = pa.BufferOutputStream()
    fmt.write_whole(buffer, schema.empty_table())
    return pq.ParquetFile(pa.BufferReader(buffer.getvalue())).schema


def _compressed_as(metadata: pq.FileMetaData, fmt: TableFormat) -> bool:
    expected = "UNCOMPRESSED" if fmt.compression == "none" else fmt.compression.upper()
    return all(
        metadata.row_group(g).column(c).compression == expected
        for g in range(metadata.num_row_groups)
        for c in range(metadata.num_columns)
    )


def adopt(
    store: Store, inputs: list[tuple[str, int]], directory: str, *, prefix: str, suffix: str
) -> list[tuple[str, int]]:
    """Each batch file (warehouse-relative, with its rows) taken into the version
    ``directory`` under its sealed name (``<prefix>-<n>``, as Spark's tasks name theirs),
    without rewriting it; returns (warehouse-relative file, rows) per file, as a compaction
    does."""
    written = []
    for n, (relative, rows) in enumerate(inputs):
        target = f"{directory}/{prefix}-{n:05d}{suffix}"
        store.link(relative, target)
        written.append((target, rows))
    return written
