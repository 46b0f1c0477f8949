"""The per-hour bound on values of data-derived partition columns (``partitioning.columns``).

One bad producer writing a fresh ``app`` value per record would otherwise create millions of
directories and metastore partitions. Per hour and column at most
``partitioning.max_values_per_column`` values are admitted: the values earlier batches admitted
(kept in the commit log) plus this batch's new values in sorted order, up to the bound. Rows
with any other value are dirty with reason ``partition_cardinality``.

The admitted set of a batch depends only on the commits before it and the batch's planned
records, so a retry admits exactly the same values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config import TableConfig
from tidemark.state.partition_values import PartitionValues
from tidemark.time.hours import hour_path, split_hour_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

REASON = "partition_cardinality"


def admit(known: PartitionValues, candidates: PartitionValues, bound: int) -> PartitionValues:
    """The values this batch adds: per hour and column, the smallest candidates not yet known,
    as many as the bound leaves room for."""
    added: PartitionValues = {}
    for hour, columns in candidates.items():
        for column, values in columns.items():
            already = set(known.get(hour, {}).get(column, ()))
            room = bound - len(already)
            new = sorted(set(values) - already)[: max(0, room)]
            if new:
                added.setdefault(hour, {})[column] = new
    return added


def candidate_values(classified: DataFrame, config: TableConfig, known: PartitionValues) -> PartitionValues:
    """Per hour and column, the smallest ``bound`` values of valid rows not admitted before.

    Ranking happens in Spark, so only at most ``bound`` values per hour and column reach the
    driver however many distinct values a hostile producer sends.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    bound = config.partitioning.max_values_per_column
    valid = classified.where(F.col("_reason").isNull())
    spark = classified.sparkSession
    hours = {hour_path(r["dt"], r["hr"]) for r in valid.select("dt", "hr").distinct().collect()}
    found: PartitionValues = {}
    for column in config.partitioning.columns:
        values = valid.select("dt", "hr", F.col(column).cast("string").alias("value")).distinct()
        known_rows = [
            (*split_hour_path(hour), value) for hour in hours for value in known.get(hour, {}).get(column, ())
        ]
        if known_rows:
            seen = spark.createDataFrame(known_rows, "dt string, hr string, value string")
            values = values.join(F.broadcast(seen), ["dt", "hr", "value"], "left_anti")
        rank = F.row_number().over(Window.partitionBy("dt", "hr").orderBy("value"))
        for r in values.withColumn("_rank", rank).where(F.col("_rank") <= bound).collect():
            found.setdefault(hour_path(r["dt"], r["hr"]), {}).setdefault(column, []).append(r["value"])
    return found


def apply_bound(classified: DataFrame, config: TableConfig, allowed: PartitionValues) -> DataFrame:
    """Mark valid rows whose partition value is not in ``allowed`` for its hour as dirty."""
    from pyspark.sql import functions as F

    spark = classified.sparkSession
    frame = classified
    over = []
    for i, column in enumerate(config.partitioning.columns):
        ok = f"_tidemark_ok_{i}"
        rows = [
            (*split_hour_path(hour), value, True)
            for hour, columns in allowed.items()
            for value in columns.get(column, ())
        ]
        table = spark.createDataFrame(rows, f"_a_dt string, _a_hr string, _a_value string, {ok} boolean")
        condition = (
            (F.col("dt") == F.col("_a_dt"))
            & (F.col("hr") == F.col("_a_hr"))
            & (F.col(column).cast("string") == F.col("_a_value"))
        )
        frame = frame.join(F.broadcast(table), condition, "left").drop("_a_dt", "_a_hr", "_a_value")
        over.append(F.when(F.col(ok).isNull(), F.lit(column)))
    if not over:
        return classified
    over_list = F.concat_ws(",", *over)
    exceeded = F.col("_reason").isNull() & (over_list != "")
    bound = config.partitioning.max_values_per_column
    detail = F.concat(F.lit("fields="), over_list, F.lit(f"; max_values_per_column={bound} per hour"))
    return frame.select(
        *[F.col(c) for c in classified.columns if c not in ("_reason", "_detail", "_late")],
        F.when(exceeded, F.lit(False)).otherwise(F.col("_late")).alias("_late"),
        F.when(exceeded, F.lit(REASON)).otherwise(F.col("_reason")).alias("_reason"),
        F.when(exceeded, detail).otherwise(F.col("_detail")).alias("_detail"),
    )
