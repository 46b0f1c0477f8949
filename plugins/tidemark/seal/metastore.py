"""Hive metastore DDL for tidemark tables: statement builders (pure) and their executor.

Every identifier is back-quoted and every value single-quoted with escapes; partition values
from data were already restricted to ``[A-Za-z0-9_.-]`` by the dump, so quoting is a second
line of defence, not the only one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.config import TableConfig
from tidemark.ingest.columns import HOUR_COLUMNS, META_FIELDS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DATABASE = "default"


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def quote_value(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def qualified(table: str) -> str:
    return f"{quote_identifier(DATABASE)}.{quote_identifier(table)}"


def external_parquet_sql(
    table: str, columns: Sequence[tuple[str, str]], partitions: Sequence[str], location: Path
) -> str:
    """CREATE EXTERNAL TABLE IF NOT EXISTS over Parquet files, string partition columns."""
    data = ", ".join(f"{quote_identifier(n)} {t}" for n, t in columns)
    partitioned = ", ".join(f"{quote_identifier(p)} string" for p in partitions)
    return (
        f"CREATE EXTERNAL TABLE IF NOT EXISTS {qualified(table)} ({data}) "
        f"PARTITIONED BY ({partitioned}) STORED AS PARQUET LOCATION {quote_value(str(location))}"
    )


def create_table_sql(config: TableConfig, table: str, location: Path) -> str:
    """External Parquet table with the config's columns, MQ lineage and partition columns."""
    parts = [*HOUR_COLUMNS, *config.partitioning.columns]
    columns = [(c.name, c.type.ddl()) for c in config.schema_columns if c.name not in parts]
    return external_parquet_sql(table, [*columns, *META_FIELDS], parts, location)


def add_partition_sql(table: str, spec: Mapping[str, str], location: Path) -> str:
    values = ", ".join(f"{quote_identifier(k)}={quote_value(v)}" for k, v in spec.items())
    return (
        f"ALTER TABLE {qualified(table)} ADD IF NOT EXISTS PARTITION ({values}) "
        f"LOCATION {quote_value(str(location))}"
    )


class Metastore:
    """Runs the DDL through the session's Hive client (embedded Derby or a metastore service)."""

    def __init__(self, spark: SparkSession, config: TableConfig) -> None:
        self.spark = spark
        self.config = config

    def ensure_table(self, table: str, location: Path) -> None:
        location.mkdir(parents=True, exist_ok=True)
        self.spark.sql(create_table_sql(self.config, table, location))

    def add_partitions(self, table: str, partitions: Sequence[tuple[Mapping[str, str], Path]]) -> None:
        for spec, location in partitions:
            self.spark.sql(add_partition_sql(table, spec, location))
            log.info("%s: registered partition %s at %s", table, dict(spec), location)

    def partition_names(self, table: str) -> list[str]:
        return [r[0] for r in self.spark.sql(f"SHOW PARTITIONS {qualified(table)}").collect()]
