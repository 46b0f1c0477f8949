"""Spark over ``tidemark.tablefs``: a Python data source that reads Parquet files through
pyarrow's filesystems, and a writer whose tasks write their own files (no Hadoop filesystem,
no rename; see tablefs for why).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: TID253
from pyspark.sql.types import StructType  # noqa: TID253

from tidemark.arrowfiles import PartitionedFiles, conform, path_values
from tidemark.tableformat import PARQUET, TableFormat, arrow_batches, format_of
from tidemark.tablefs import Store, data_files, filesystem, s3_from_environment, spark_reads
from tidemark.task_runtime import task_body

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

SOURCE_NAME = "tidemark_files"


class FilesPartition(InputPartition):
    def __init__(self, files: Sequence[str]) -> None:
        super().__init__(list(files))
        self.files = list(files)


class ArrowFilesDataSource(DataSource):
    """Options: ``files`` (JSON list of URIs), ``schema`` (Spark DDL), ``per_task`` (files per
    Spark task, default 1), ``secret.s3`` (JSON S3 settings for the executors; the option name
    matches Spark's redaction pattern, so keys never show in plans or the UI)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return self.options["schema"]

    def reader(self, schema: StructType) -> DataSourceReader:
        return ArrowFilesReader(
            json.loads(self.options["files"]),
            schema,
            int(self.options.get("per_task", 1)),
            json.loads(self.options.get("secret.s3", "{}")),
        )


class ArrowFilesReader(DataSourceReader):
    """Reads each file under the requested schema, as Spark's Parquet reader does across a
    schema change: a column a file lacks reads as null, a narrower number is widened; and as
    it discovers Hive partitions: a column a file lacks but its path names (``.../app=web/``)
    reads as that value."""

    def __init__(self, files: list[str], schema: StructType, per_task: int, s3: dict[str, str]) -> None:
        self.files = files
        self.s3 = s3
        self.schema = schema
        self.names = [f.name for f in schema.fields]
        self.per_task = max(1, per_task)

    def partitions(self) -> list[InputPartition]:
        return [
            FilesPartition(self.files[i : i + self.per_task])
            for i in range(0, len(self.files), self.per_task)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from pyspark.sql.pandas.types import to_arrow_schema

        assert isinstance(partition, FilesPartition)
        target = to_arrow_schema(self.schema)
        for uri in partition.files:
            fs, path = filesystem(uri, self.s3)
            with fs.open_input_file(path) as handle:
                values = path_values(uri)
                for batch in arrow_batches(handle, format_of(path).suffix, self.names):
                    yield conform(batch, target, values)


def read_files(spark: SparkSession, files: Sequence[str], ddl: str, per_task: int = 1) -> DataFrame:
    """The rows of Parquet ``files`` (any pyarrow filesystem) as a DataFrame of ``ddl``."""
    spark.dataSource.register(ArrowFilesDataSource)
    return (
        spark.read.format(SOURCE_NAME)
        .option("files", json.dumps(list(files)))
        .option("schema", ddl)
        .option("per_task", str(per_task))
        .option("secret.s3", json.dumps(s3_from_environment()))
        .load()
    )


def read_parquet_files(spark: SparkSession, files: Sequence[str], ddl: str) -> DataFrame:
    """Parquet ``files`` (paths or URIs of one store) as one frame of ``ddl``: Spark's own
    reader where its Hadoop filesystems reach them, else tidemark's pyarrow data source."""
    if files and not spark_reads(files[0]):
        return read_files(spark, files, ddl)
    return spark.read.schema(ddl).parquet(*files)


def read_table_files(
    spark: SparkSession, store: Store, base: Path, files: Sequence[Path] | None, ddl: str
) -> DataFrame:
    """Table files under ``base`` (or just ``files``), all under the warehouse ``store``, as
    one frame of ``ddl`` with the partition columns read back from the paths below ``base``.
    Spark's own reader where its Hadoop filesystems reach the store (local disk, HDFS), else
    tidemark's pyarrow data source (S3: no s3a on the executors; and files from several
    directories, such as an amend's current version and late files, which no one
    ``basePath`` of Spark's reader covers)."""
    root = Path(store.root)
    scattered = files is not None and not all(f.is_relative_to(base) for f in files)
    if not store.spark_reads or scattered:
        chosen = (
            [str(f.relative_to(root)) for f in files]
            if files is not None
            else store.files(str(base.relative_to(root)))
        )
        return read_files(spark, [store.uri(f) for f in chosen], ddl)
    paths = [str(f) for f in files] if files is not None else [str(base)]
    # a directory never mixes formats: sealed hours are the table's, batch files Parquet
    sample = paths[0] if files is not None else next((str(p) for p in data_files(base)), "")
    reader = spark.read.schema(ddl).option("basePath", str(base))
    return format_of(sample).spark_read(reader, *paths)


def write_files(
    frame: DataFrame,
    store: Store,
    directory: str,
    prefix: str,
    n_files: int,
    *,
    sort_by: Sequence[str] = (),
    partition_by: Sequence[str] = (),
    fmt: TableFormat = PARQUET,
) -> list[tuple[str, int]]:
    """Write ``frame`` as about ``n_files`` files ``<prefix>-NNNNN.<fmt>`` (Parquet, or the
    table's format) in a
    warehouse directory, each Spark task writing its own file through pyarrow (no Hadoop
    filesystem, no rename: on an object store every file is one upload under its final name;
    a retried task rewrites the same name). The directory is a new one nobody reads yet (a
    version of an hour, registered after). Returns (warehouse-relative path, rows) per file,
    sorted; tasks without rows write nothing. ``sort_by`` orders the rows within each file;
    ``partition_by`` columns go to ``col=value/`` subdirectories (``write_partitioned``)."""
    spread = into_files(frame, n_files)
    if sort_by:
        spread = spread.sortWithinPartitions(*sort_by)
    name = functools.partial(_numbered, prefix, fmt.suffix)
    return write_partitioned(spread, store, directory, name, partition_by, fmt=fmt)


def into_files(frame: DataFrame, n_files: int) -> DataFrame:
    """``frame`` as ``n_files`` partitions, one per file to write: one file needs no shuffle
    (``coalesce``: the read and the write in one task, at the size of a file), more are
    spread evenly (``repartition``)."""
    return frame.coalesce(1) if n_files <= 1 else frame.repartition(n_files)


def _numbered(prefix: str, suffix: str, task: int) -> str:
    return f"{prefix}-{task:05d}{suffix}"


def write_partitioned(
    frame: DataFrame,
    store: Store,
    directory: str,
    file_name: Callable[[int], str],
    partition_by: Sequence[str] = (),
    *,
    fmt: TableFormat = PARQUET,
) -> list[tuple[str, int]]:
    """Each Spark task of ``frame`` writes its rows through pyarrow under ``directory``
    (:class:`PartitionedFiles`), named ``file_name(task index)``: final names, so a retried
    task rewrites the same files. The values must be path-safe (hours; partition values the
    classifier admitted). Returns (warehouse-relative path, rows) per file, sorted; tasks
    without rows write nothing."""
    import pyarrow as pa

    parts = list(partition_by)

    @task_body
    def write_task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        files = PartitionedFiles(
            store, directory, file_name(context.partitionId() if context is not None else 0), parts, fmt
        )
        try:
            for batch in batches:
                files.write(batch)
        finally:
            written = files.close()
        if written:
            yield pa.RecordBatch.from_pydict(
                {"path": [p for p, _ in written], "rows": [n for _, n in written]}
            )

    written = frame.mapInArrow(write_task, "path string, rows long").collect()
    return sorted((row["path"], int(row["rows"])) for row in written)
