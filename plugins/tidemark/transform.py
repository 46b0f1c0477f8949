"""Pure DataFrame transforms of the dump: raw MQ records -> typed rows or dirty records.

Parsing happens in the JVM (``from_json`` + ``try_cast``), never per record in Python: the
data source only moves bytes. Each record is classified once, with the first reason that
applies, in this order:

| reason | when |
|---|---|
| ``oversized`` | the message is larger than ``source.max_message_bytes`` |
| ``null_value`` | the message has no value (a tombstone) |
| ``invalid_json`` | the value is not a JSON object |
| ``null_event_time`` | the event-time field is missing or null |
| ``missing_field`` | a ``not null`` column is missing or null |
| ``type_mismatch`` | a value cannot be converted to its column's type |
| ``future_event_time`` | event time > the batch's processing time + ``watermark.max_future_skew`` |
| ``invalid_partition_value`` | a value of a ``partitioning.columns`` column is null, longer than 64, or \
not made of ``[A-Za-z0-9_.-]`` (so no path separators, ``..``, quotes or spaces) |
| ``partition_cardinality`` | the value would exceed ``partitioning.max_values_per_column`` distinct \
values of its column in its hour (decided after this classification, see ``cardinality.py``) |

Good records whose event time is before the plan's ``sealed_through`` belong to an hour that
is already sealed: they are *late* (``_late``) and go to the late files, never to the table.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.config import TableConfig
from tidemark.hours import spark_hour_columns

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

REASONS = (
    "oversized",
    "null_value",
    "invalid_json",
    "null_event_time",
    "missing_field",
    "type_mismatch",
    "future_event_time",
    "invalid_partition_value",
    "partition_cardinality",
)
# Values of data-derived partition columns: safe in paths and in quoted metastore DDL.
PARTITION_VALUE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
CORRUPT = "_tidemark_corrupt"
META_COLUMNS = ("_mq_partition", "_mq_offset", "_mq_timestamp", "_batch_id")
HOUR_COLUMNS = ("dt", "hr")
DIRTY_COLUMNS = (
    "topic",
    "mq_partition",
    "mq_offset",
    "mq_timestamp",
    "batch_id",
    "run_id",
    "reason",
    "detail",
    "raw_key",
    "raw_value",
)


def _typed(raw: SparkColumn, ddl: str, complex_type: bool) -> SparkColumn:
    from pyspark.sql import functions as F

    if complex_type:
        return F.from_json(raw, ddl)
    return raw.try_cast(ddl)


def classify(
    raw: DataFrame,
    config: TableConfig,
    *,
    topic: str,
    batch_id: int,
    run_id: str,
    processing_time: datetime,
    sealed_through: datetime | None = None,
) -> DataFrame:
    """Parse raw records (RAW_SCHEMA of the source) into typed columns plus ``_reason``
    (null for good rows) and ``_detail``, keeping MQ coordinates for lineage and dedup."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    columns = config.schema_columns
    raw_schema = StructType(
        [StructField(c.name, StringType()) for c in columns] + [StructField(CORRUPT, StringType())]
    )
    text = F.col("value").cast("string")
    parsed = raw.withColumn(
        "_j", F.from_json(text, raw_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    )
    typed = {
        c.name: _typed(F.col(f"_j.{c.name}"), c.type.ddl(), c.type.name in {"array", "map", "struct"})
        for c in columns
    }
    ts_field = config.event_time.field
    missing = [F.when(F.col(f"_j.{c.name}").isNull(), F.lit(c.name)) for c in columns if not c.nullable]
    mismatch = [
        F.when(F.col(f"_j.{c.name}").isNotNull() & typed[c.name].isNull(), F.lit(c.name)) for c in columns
    ]
    missing_list = F.concat_ws(",", *missing) if missing else F.lit("")
    mismatch_list = F.concat_ws(",", *mismatch)
    future_limit = F.lit(processing_time + config.watermark.max_future_skew).cast("timestamp")
    bad_values = [
        F.when(
            typed[c].isNull() | ~typed[c].rlike(PARTITION_VALUE_PATTERN) | typed[c].contains(".."), F.lit(c)
        )
        for c in config.partitioning.columns
    ]
    bad_value_list = F.concat_ws(",", *bad_values) if bad_values else F.lit("")
    reason = (
        F.when(F.length("value") > config.source.max_message_bytes, F.lit("oversized"))
        .when(F.col("value").isNull(), F.lit("null_value"))
        .when(F.col("_j").isNull() | F.col(f"_j.{CORRUPT}").isNotNull(), F.lit("invalid_json"))
        .when(F.col(f"_j.{ts_field}").isNull(), F.lit("null_event_time"))
        .when(missing_list != "", F.lit("missing_field"))
        .when(mismatch_list != "", F.lit("type_mismatch"))
        .when(typed[ts_field] > future_limit, F.lit("future_event_time"))
        .when(bad_value_list != "", F.lit("invalid_partition_value"))
    )
    detail = (
        F.when(reason == "oversized", F.concat(F.lit("bytes="), F.length("value").cast("string")))
        .when(reason == "missing_field", F.concat(F.lit("fields="), missing_list))
        .when(reason == "type_mismatch", F.concat(F.lit("fields="), mismatch_list))
        .when(reason == "future_event_time", F.concat(F.lit("limit="), future_limit.cast("string")))
        .when(reason == "invalid_partition_value", F.concat(F.lit("fields="), bad_value_list))
    )
    dt, hr = spark_hour_columns(typed[ts_field], config.event_time.time_zone)
    late = (
        typed[ts_field] < F.lit(sealed_through).cast("timestamp")
        if sealed_through is not None
        else F.lit(False)
    )
    # Raw bytes are kept only where the dirty table needs them: the batch is cached, and a copy
    # of every message doubled its size. The cardinality bound decides dirt after this, so a
    # table with data-derived partition columns keeps them all.
    keep_raw = reason.isNotNull() | F.lit(bool(config.partitioning.columns))
    return parsed.select(
        *[typed[c.name].alias(c.name) for c in columns],
        dt.alias("dt"),
        hr.alias("hr"),
        (reason.isNull() & late).alias("_late"),
        F.col("mq_partition").alias("_mq_partition"),
        F.col("mq_offset").alias("_mq_offset"),
        F.col("mq_timestamp").alias("_mq_timestamp"),
        F.lit(batch_id).cast("bigint").alias("_batch_id"),
        reason.alias("_reason"),
        F.when(keep_raw, F.col("key")).alias("_raw_key"),
        F.when(keep_raw, F.col("value")).alias("_raw_value"),
        F.lit(topic).alias("_topic"),
        F.lit(run_id).alias("_run_id"),
        detail.alias("_detail"),
    )


def good_rows(classified: DataFrame, config: TableConfig) -> DataFrame:
    """Rows of the table: schema columns, MQ lineage columns and the hour partition columns."""
    from pyspark.sql import functions as F

    return classified.where(F.col("_reason").isNull() & ~F.col("_late")).select(*table_columns(config))


def late_rows(classified: DataFrame, config: TableConfig) -> DataFrame:
    """Valid rows of hours sealed before the batch was planned, with the table's columns."""
    from pyspark.sql import functions as F

    return classified.where(F.col("_reason").isNull() & F.col("_late")).select(*table_columns(config))


def table_columns(config: TableConfig) -> list[str]:
    """Column order of the table files: schema, MQ lineage, then partition columns."""
    names = [c.name for c in config.schema_columns if c.name not in config.partitioning.columns]
    return [*names, *META_COLUMNS, *partition_columns(config)]


def partition_columns(config: TableConfig) -> list[str]:
    return [*HOUR_COLUMNS, *config.partitioning.columns]


def dirty_rows(classified: DataFrame) -> DataFrame:
    """Rows of ``<table>__dirty``: raw bytes, reason code and where the record came from."""
    from pyspark.sql import functions as F

    return classified.where(F.col("_reason").isNotNull()).select(
        F.col("_topic").alias("topic"),
        F.col("_mq_partition").alias("mq_partition"),
        F.col("_mq_offset").alias("mq_offset"),
        F.col("_mq_timestamp").alias("mq_timestamp"),
        F.col("_batch_id").alias("batch_id"),
        F.col("_run_id").alias("run_id"),
        F.col("_reason").alias("reason"),
        F.col("_detail").alias("detail"),
        F.col("_raw_key").alias("raw_key"),
        F.col("_raw_value").alias("raw_value"),
    )
