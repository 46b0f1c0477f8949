"""Table files through ``pyarrow.fs``: one way to open, list and read the Parquet files of a
warehouse on local disk, HDFS or S3, and a Spark Python data source that reads them.

The pyspark wheel has no hadoop-aws, so Spark cannot read ``s3a://`` here (the only s3a jars on
the registries are hadoop-aws 3.3.1 with AWS SDK v1, a version mix Hadoop does not support).
tidemark's own jobs therefore read table files through this data source: each Spark task opens
its files with pyarrow's S3 (or local, or HDFS) filesystem and hands Arrow record batches to
Spark. A user's Spark reading the tables through the metastore uses its own matching
hadoop-aws, as in any production deployment; docs/benchmarks.md has the figures behind the
choice (``bench/s3_read.py``).

S3 endpoint and credentials come from the driver's usual ``AWS_*`` environment
(``AWS_ENDPOINT_URL`` for a non-AWS store) and reach the executors in a ``secret.``-named
option, which Spark redacts from plans and the UI (as the Kafka source's client settings).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import DataFrame, SparkSession

SOURCE_NAME = "tidemark_files"


def s3_from_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The S3 settings of the ``AWS_*`` environment (endpoint, region, keys), for executors
    whose environment the driver's does not reach (a cluster's, or a Spark started before
    them); empty values left out, so instance roles keep working."""
    env = dict(os.environ if env is None else env)
    keys = {
        "endpoint": "AWS_ENDPOINT_URL",
        "region": "AWS_REGION",
        "access_key": "AWS_ACCESS_KEY_ID",
        "secret_key": "AWS_SECRET_ACCESS_KEY",
        "session_token": "AWS_SESSION_TOKEN",
    }
    return {name: env[var] for name, var in keys.items() if env.get(var)}


def filesystem(uri: str, s3: dict[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) for a local path, ``file://``, ``hdfs://``,
    ``s3://`` or ``s3a://`` URI; S3 settings from ``s3`` (see :func:`s3_from_environment`),
    else from this process's environment."""
    import pyarrow.fs as pafs

    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a"):
        conf = s3_from_environment() if s3 is None else s3
        options: dict[str, Any] = {"region": conf.get("region", "us-east-1")}
        if conf.get("endpoint"):
            ep = urlparse(conf["endpoint"])
            options.update(endpoint_override=ep.netloc or conf["endpoint"], scheme=ep.scheme or "https")
        if conf.get("access_key"):
            options.update(
                access_key=conf["access_key"],
                secret_key=conf.get("secret_key", ""),
                session_token=conf.get("session_token"),
            )
        return pafs.S3FileSystem(**options), f"{parsed.netloc}{parsed.path}"
    if parsed.scheme in ("", "file"):
        return pafs.LocalFileSystem(), parsed.path if parsed.scheme else uri
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path


def parquet_files(uri: str) -> list[str]:
    """The visible Parquet files under ``uri`` (recursively; ``_``/``.`` parts are hidden, as
    for Hive and Spark), as URIs of the same scheme, sorted."""
    import pyarrow.fs as pafs

    fs, root = filesystem(uri)
    prefix = uri[: len(uri) - len(root)] if uri.endswith(root) else ""
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    found = []
    for info in infos:
        relative = info.path[len(root) :].lstrip("/")
        hidden = any(part.startswith(("_", ".")) for part in relative.split("/"))
        if info.type == pafs.FileType.File and info.path.endswith(".parquet") and not hidden:
            found.append(prefix + info.path)
    return sorted(found)


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
    def __init__(self, files: list[str], schema: StructType, per_task: int, s3: dict[str, str]) -> None:
        self.files = files
        self.s3 = s3
        self.names = [f.name for f in schema.fields]
        self.per_task = max(1, per_task)

    def partitions(self) -> list[InputPartition]:
        return [
            FilesPartition(self.files[i : i + self.per_task])
            for i in range(0, len(self.files), self.per_task)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow.parquet as pq

        assert isinstance(partition, FilesPartition)
        for uri in partition.files:
            fs, path = filesystem(uri, self.s3)
            with fs.open_input_file(path) as handle:
                yield from pq.ParquetFile(handle).iter_batches(batch_size=65_536, columns=self.names)


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
