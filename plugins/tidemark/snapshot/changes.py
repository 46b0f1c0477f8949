"""How a CDC table's changes fold into a state (pure transforms on DataFrames, no I/O).

Per primary key the row with the highest (version, MQ offset, MQ partition) wins; if that row
is a delete (``cdc.delete_ops``) the key is gone. Snapshot rows rank below every change of
the same version, so a change re-delivered after a bootstrap read it is still harmless.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidemark.seal.metastore import quote_identifier
from tidemark.snapshot.delta_engines import DELETE_FLAG

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _ranked(frame: DataFrame, columns: list[str], op: Any, offset: Any, partition: Any) -> DataFrame:
    from pyspark.sql import functions as F

    return frame.select(
        *(F.col(quote_identifier(c)) for c in columns),
        op.cast("string").alias("_tm_op"),
        offset.cast("bigint").alias("_tm_offset"),
        partition.cast("int").alias("_tm_partition"),
    )


def _ranked_changes(changes: DataFrame, columns: list[str], op_field: str) -> DataFrame:
    from pyspark.sql import functions as F

    return _ranked(
        changes, columns, F.col(quote_identifier(op_field)), F.col("_mq_offset"), F.col("_mq_partition")
    )


def _latest_per_key(rows: DataFrame, columns: list[str], key: list[str], version_field: str) -> DataFrame:
    """Per key the row with the highest (version, MQ offset, MQ partition): columns + _tm_op."""
    from pyspark.sql import functions as F

    q = quote_identifier
    payload = F.struct(*(F.col(q(c)) for c in columns), F.col("_tm_op"))
    order = F.struct(F.col(q(version_field)), F.col("_tm_offset"), F.col("_tm_partition"))
    latest = rows.groupBy(*(F.col(q(k)) for k in key)).agg(F.max_by(payload, order).alias("_tm_row"))
    return latest.select(*(F.col(f"_tm_row.{q(c)}").alias(c) for c in [*columns, "_tm_op"]))


def latest_state(
    base: DataFrame,
    changes: DataFrame,
    *,
    key: list[str],
    version_field: str,
    op_field: str,
    delete_ops: list[str],
) -> DataFrame:
    """Fold ``changes`` (snapshot columns + op + ``_mq_partition``/``_mq_offset``) into
    ``base`` (snapshot columns): the latest row per key, deleted keys dropped."""
    from pyspark.sql import functions as F

    columns = base.columns
    none = F.lit(None)
    rows = _ranked(base, columns, none, F.lit(-1), F.lit(-1)).unionByName(
        _ranked_changes(changes, columns, op_field)
    )
    latest = _latest_per_key(rows, columns, key, version_field)
    alive = latest.filter(F.col("_tm_op").isNull() | ~F.col("_tm_op").isin(delete_ops))
    return alive.select(*(F.col(quote_identifier(c)) for c in columns))


def latest_changes(
    changes: DataFrame,
    columns: list[str],
    *,
    key: list[str],
    version_field: str,
    op_field: str,
    delete_ops: list[str],
) -> DataFrame:
    """Per key its newest change (as ``latest_state`` ranks them), flagged ``_tm_delete``:
    the source of a record-level MERGE, which compares it with the stored row's version."""
    from pyspark.sql import functions as F

    latest = _latest_per_key(_ranked_changes(changes, columns, op_field), columns, key, version_field)
    return latest.select(
        *(F.col(quote_identifier(c)) for c in columns),
        F.coalesce(F.col("_tm_op").isin(delete_ops), F.lit(False)).alias(DELETE_FLAG),
    )


def state_difference(desired: DataFrame, current: DataFrame, key: list[str]) -> DataFrame:
    """What turns ``current`` into ``desired`` (both one row per key): changed or new rows,
    and the keys to delete, flagged ``_tm_delete``."""
    from pyspark.sql import functions as F

    changed = desired.subtract(current).withColumn(DELETE_FLAG, F.lit(False))
    gone = current.join(desired.select(*key), key, "left_anti").withColumn(DELETE_FLAG, F.lit(True))
    return changed.unionByName(gone)


def after_alignment(changes: DataFrame, offsets: dict[str, int]) -> DataFrame:
    """Drop increment rows below a bootstrap's aligned offsets (already in the source it read)."""
    from pyspark.sql import functions as F

    if not offsets:
        return changes
    floor = F.lit(0).cast("bigint")
    for partition, offset in offsets.items():
        floor = F.when(F.col("_mq_partition") == int(partition), F.lit(int(offset))).otherwise(floor)
    return changes.filter(F.col("_mq_offset") >= floor)
