"""The Hive metastore service of the e2e tests, on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from tidemark.config import TableConfig
from tidemark.ingest.columns import data_fields
from tidemark.metastore_service import DATABASE, MetastoreConnection
from tidemark.settings import Settings
from tidemark_dev.net import free_port
from tidemark_dev.postgres import MetastoreService


@contextmanager
def metastore_service(settings: Settings) -> Iterator[Settings]:
    """Run the service for ``settings`` (its warehouse decides s3a); yield settings whose jobs
    use it."""
    own = replace(settings, metastore_port=free_port())
    service = MetastoreService(own)
    service.start()
    try:
        yield replace(own, hive_metastore_uris=service.address())
    finally:
        service.stop()


def hive_made_table(connection: MetastoreConnection, config: TableConfig, table: str, location: str) -> None:
    """``table`` with ``config``'s columns as Hive itself creates one (Parquet serde, string
    partition columns, no Spark properties): what a table made by another tool looks like to
    the seal, which then registers its hours over Thrift without starting Spark."""
    from pymetastore.hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor, Table

    columns = [FieldSchema(name, kind, None) for name, kind in data_fields(config)]
    keys = [FieldSchema(k, "string", None) for k in ("dt", "hr", *config.partitioning.columns)]
    storage = StorageDescriptor(
        cols=columns,
        location=location,
        inputFormat="org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
        outputFormat="org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
        compressed=False,
        numBuckets=-1,
        serdeInfo=SerDeInfo(
            None, "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe", {"serialization.format": "1"}
        ),
        bucketCols=[],
        sortCols=[],
        parameters={},
    )
    shape = Table(
        tableName=table,
        dbName=DATABASE,
        owner="test",
        sd=storage,
        partitionKeys=keys,
        parameters={"EXTERNAL": "TRUE"},
        tableType="EXTERNAL_TABLE",
    )
    connection.call("creating the test's table", lambda c: c.create_table(shape))
