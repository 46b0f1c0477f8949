"""The file format of a table's sealed hours (``output.format``): Parquet or ORC, with its
compression. One seam: Spark's writers and readers, pyarrow's (object stores), the Hive DDL.

Only the files readers see take the table's format: sealed hours and their versions (the
seal's compaction, amends, rebuilds). tidemark's own intermediate files (a batch's open files,
staging, the late side table and the dirty table) are Parquet whatever the table's format, so
one compaction turns them into the table's format; a directory never mixes formats, and a
file's format is its suffix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, DataFrameReader, DataFrameWriter

    from tidemark.config import TableConfig

DATA_SUFFIXES = (".parquet", ".orc")
COMPRESSIONS = {
    "parquet": ("snappy", "zstd", "lz4", "gzip", "none"),
    "orc": ("snappy", "zstd", "lz4", "zlib", "none"),
}


@dataclass(frozen=True)
class TableFormat:
    name: str  # parquet | orc
    compression: str = "snappy"
    # Parquet timestamps as INT96 (Hive's SerDe reads no other); an Iceberg table's files
    # take the spec's INT64 microseconds instead, with their min/max statistics
    int96: bool = True

    @property
    def suffix(self) -> str:
        return f".{self.name}"

    @property
    def stored_as(self) -> str:
        """The Hive DDL's ``STORED AS`` of the format."""
        return self.name.upper()

    def spark_write(self, writer: DataFrameWriter, path: str) -> None:
        writer.format(self.name).option("compression", self.compression).save(path)

    def spark_read(self, reader: DataFrameReader, *paths: str) -> DataFrame:
        return reader.format(self.name).load(list(paths) if len(paths) > 1 else paths[0])

    def arrow_writer(self, out: Any, schema: pa.Schema) -> Any:
        """A writer of Arrow tables (``write_table``, ``close``) onto an output stream.
        Parquet timestamps are INT96, as Spark's writer stores them: Hive's Parquet SerDe (2.x,
        3.x; Impala, older Presto) reads no INT64 timestamp (``PlainLongDictionary``), and a
        file written beside Spark's keeps their encoding. pyarrow reads them back through
        :func:`arrow_batches` (``coerce_int96_timestamp_unit``: years past 2262 too)."""
        if self.name == "orc":
            return _OrcBatches(out, self.compression)
        import pyarrow.parquet as pq

        return pq.ParquetWriter(
            out, schema, compression=self.compression, use_deprecated_int96_timestamps=self.int96
        )

    def write_whole(self, out: Any, table: pa.Table) -> None:
        """``table`` as one file onto an output stream."""
        writer = self.arrow_writer(out, table.schema)
        writer.write_table(table)
        writer.close()


PARQUET = TableFormat("parquet")


def table_format(config: TableConfig, *, int96: bool = False) -> TableFormat:
    """The format of the table's sealed hours (``int96``: timestamps as INT96, for the Hive
    readers its publication serves: ``HourPublication.int96_timestamps``)."""
    return TableFormat(config.output.format, config.output.compression, int96=int96)


def batch_format(config: TableConfig, *, int96: bool) -> TableFormat | None:
    """The format a batch's rows are written in: a Parquet table's sealed format (its
    compression, and INT96 timestamps where its publication needs them), so that the seal
    can adopt a batch file near the target size as it is (``seal.adoption``); None for an
    ORC table (its batch files stay pyarrow's default Parquet, and are always rewritten)."""
    if config.output.format != "parquet":
        return None
    return table_format(config, int96=int96)


def format_of(path: str) -> TableFormat:
    """The format of a data file (or of a directory's files), by its suffix."""
    return TableFormat("orc") if path.endswith(".orc") else PARQUET


def is_data_file(name: str) -> bool:
    return name.endswith(DATA_SUFFIXES)


def file_rows(handle: Any, suffix: str) -> int:
    """Rows in a data file, from its footer (no data is read)."""
    if suffix == ".orc":
        from pyarrow import orc

        return int(orc.ORCFile(handle).nrows)
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(handle).metadata.num_rows)


def arrow_batches(handle: Any, suffix: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The record batches of one data file (an input file), the ``columns`` it has."""
    if suffix == ".orc":
        from pyarrow import orc

        file = orc.ORCFile(handle)
        present = [n for n in columns if n in file.schema.names]
        table = file.read(columns=present)
        yield from _micros(table).to_batches(max_chunksize=65_536)
        return
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
    present = [n for n in columns if n in parquet.schema_arrow.names]
    yield from parquet.iter_batches(batch_size=65_536, columns=present)


def _micros(table: pa.Table) -> pa.Table:
    """ORC reads timestamps as nanoseconds: microseconds, as they were written."""
    import pyarrow as pa

    fields = [
        pa.field(f.name, pa.timestamp("us", tz=f.type.tz)) if pa.types.is_timestamp(f.type) else f
        for f in table.schema
    ]
    return table.cast(pa.schema(fields))


class _OrcBatches:
    """pyarrow's ORC writer behind the Parquet writer's ``write_table``."""

    def __init__(self, out: Any, compression: str) -> None:
        from pyarrow import orc

        self._writer = orc.ORCWriter(
            out, compression="uncompressed" if compression == "none" else compression
        )

    def write_table(self, table: pa.Table) -> None:
        self._writer.write(_wall_clock(table))

    def close(self) -> None:
        self._writer.close()


def _wall_clock(table: pa.Table) -> pa.Table:
    """Instants (timestamps with a zone: UTC, as Spark hands them), nested ones too, as plain
    timestamps of their UTC wall clock: pyarrow writes the former as ORC's ``timestamp with
    local time zone``, a type Spark's and Hive's ORC readers refuse; a plain ORC ``timestamp``
    is what Spark writes for its own timestamps and reads back as the same instant (the
    session zone is UTC)."""
    import pyarrow as pa

    schema = pa.schema([f.with_type(_zoneless(f.type)) for f in table.schema])
    return table if schema.equals(table.schema) else table.cast(schema)


def _zoneless(kind: pa.DataType) -> pa.DataType:
    import pyarrow as pa

    if pa.types.is_timestamp(kind):
        return pa.timestamp(kind.unit)
    if pa.types.is_struct(kind):
        return pa.struct(
            [kind.field(i).with_type(_zoneless(kind.field(i).type)) for i in range(kind.num_fields)]
        )
    if pa.types.is_map(kind):
        return pa.map_(
            kind.key_field.with_type(_zoneless(kind.key_type)),
            kind.item_field.with_type(_zoneless(kind.item_type)),
        )
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_zoneless(kind.value_type)))
    return kind
