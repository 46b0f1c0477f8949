"""The fixed columns of tidemark's tables and files, declared once as (name, Spark type):
MQ lineage, hour labels, the raw bytes and verdict of a classified record, and the dirty
table. Arrow schemas, the data source's DDL, the metastore DDL and Spark's column order all
derive from these declarations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tidemark.schema import parse_column

if TYPE_CHECKING:
    import pyarrow as pa

    from tidemark.config import TableConfig

REASONS = (
    "oversized",
    "tombstone",
    "invalid_json",
    "bad_framing",
    "unknown_schema_id",
    "schema_unresolvable",
    "undecodable",
    "invalid_envelope",
    "null_event_time",
    "missing_field",
    "type_mismatch",
    "unrepresentable_in_parquet",
    "unrepresentable_in_orc",
    "event_time_out_of_range",
    "event_time_too_old",
    "future_event_time",
    "invalid_partition_value",
    "partition_cardinality",
)
# A message without a value: counted apart from dirty records (docs/configuration.md).
TOMBSTONE = "tombstone"
# Values of data-derived partition columns: safe in paths and in quoted metastore DDL.
PARTITION_VALUE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
HOUR_COLUMNS = ("dt", "hr")
# MQ lineage every row of a table carries (the table's own columns, in the metastore too)
META_FIELDS = (
    ("_mq_partition", "int"),
    ("_mq_offset", "bigint"),
    ("_mq_timestamp", "bigint"),
    ("_batch_id", "bigint"),
)
META_COLUMNS = tuple(name for name, _ in META_FIELDS)
# The fixed columns, (name, Spark type) declared once: Arrow schemas and the data source's DDL
# are derived from them (``schema.SqlType.to_arrow``).
LINEAGE_FIELDS = (("dt", "string"), ("hr", "string"), ("_late", "boolean"), *META_FIELDS)
RAW_FIELDS = (("_raw_key", "binary"), ("_raw_value", "binary"))
VERDICT_FIELDS = (("_reason", "string"), ("_detail", "string"), ("_topic", "string"), ("_run_id", "string"))
# (column of <table>__dirty, Spark type, the classified frame's column it comes from)
DIRTY_FIELDS = (
    ("topic", "string", "_topic"),
    ("mq_partition", "int", "_mq_partition"),
    ("mq_offset", "bigint", "_mq_offset"),
    ("mq_timestamp", "bigint", "_mq_timestamp"),
    ("batch_id", "bigint", "_batch_id"),
    ("run_id", "string", "_run_id"),
    ("reason", "string", "_reason"),
    ("detail", "string", "_detail"),
    ("raw_key", "binary", "_raw_key"),
    ("raw_value", "binary", "_raw_value"),
)
DIRTY_COLUMNS = tuple(name for name, _, _ in DIRTY_FIELDS)


def arrow_fields(fields: Sequence[tuple[str, str]]) -> list[pa.Field]:
    import pyarrow as pa

    return [pa.field(name, parse_column(name, ddl).type.to_arrow()) for name, ddl in fields]


def dirty_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(arrow_fields([(name, kind) for name, kind, _ in DIRTY_FIELDS]))


def data_fields(config: TableConfig) -> list[tuple[str, str]]:
    """(name, Spark type) of the columns inside a table's files: the schema's columns but the
    partition columns, then MQ lineage (the metastore's data columns, the hour's read schema)."""
    parts = config.partitioning.columns
    columns = [(c.name, c.type.ddl()) for c in config.schema_columns if c.name not in parts]
    return [*columns, *META_FIELDS]


def table_columns(config: TableConfig) -> list[str]:
    """Column order of the table files: schema, MQ lineage, then partition columns."""
    names = [c.name for c in config.schema_columns if c.name not in config.partitioning.columns]
    return [*names, *META_COLUMNS, *partition_columns(config)]


def partition_columns(config: TableConfig) -> list[str]:
    return [*HOUR_COLUMNS, *config.partitioning.columns]
