"""The Hive metastore service of the e2e tests, on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from tidemark.config import TableConfig
from tidemark.fresh.hive_table import table_definition
from tidemark.metastore_service import MetastoreConnection
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
    shape = table_definition(config, table, location)
    connection.call("creating the test's table", lambda c: c.create_table(shape))
