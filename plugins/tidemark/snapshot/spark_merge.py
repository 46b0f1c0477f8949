"""What Spark runs for a snapshot whatever the table's format (delta-spark, Iceberg): the
bootstrap's frame of staged files, the one MERGE statement, and the session conf a commit
carries for one statement."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tidemark.seal.metastore import quote_identifier
from tidemark.snapshot.versioned import DELETE_FLAG
from tidemark.tablefs import filesystem, hadoop_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def staged_frame(
    spark: SparkSession, files: Sequence[str], columns: Sequence[tuple[str, str]], file_size: int
) -> DataFrame:
    """The bootstrap's staged (key-sorted) Parquet files cast to the snapshot's types, in
    partitions of about ``file_size`` bytes, each of whole staged files (``coalesce`` keeps
    their order), so the table's files cover key ranges a MERGE of recent keys rewrites few of."""
    from pyspark.sql import functions as F

    size = sum(_file_size(f) for f in files)
    frame = spark.read.parquet(*(hadoop_uri(f) for f in files)).select(
        *(F.col(quote_identifier(n)).cast(t).alias(n) for n, t in columns)
    )
    return frame.coalesce(max(1, math.ceil(size / file_size)))


def _file_size(uri: str) -> int:
    fs, path = filesystem(uri)
    return int(fs.get_file_info(path).size or 0)


def merge_sql(
    target: str,
    source_view: str,
    *,
    key: Sequence[str],
    names: Sequence[str],
    version_field: str,
    only_newer: bool,
) -> str:
    """MERGE ``source_view`` (the snapshot's columns and ``_tm_delete``, one row per key) into
    ``target``: delete, update when the change is at least as new (``only_newer``), insert."""
    q = quote_identifier
    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in key)
    version = q(version_field)
    newer = f"(t.{version} IS NULL OR s.{version} >= t.{version})" if only_newer else "true"
    flag = f"s.{q(DELETE_FLAG)}"
    columns = ", ".join(q(n) for n in names)
    return (
        f"MERGE INTO {target} t USING {source_view} s ON {on} "
        f"WHEN MATCHED AND {flag} AND {newer} THEN DELETE "
        f"WHEN MATCHED AND NOT {flag} AND {newer} THEN UPDATE SET "
        + ", ".join(f"{q(n)} = s.{q(n)}" for n in names)
        + f" WHEN NOT MATCHED AND NOT {flag} THEN INSERT ({columns}) "
        f"VALUES ({', '.join(f's.{q(n)}' for n in names)})"
    )


def run_merge(
    spark: SparkSession,
    source: DataFrame,
    target: str,
    *,
    key: Sequence[str],
    names: Sequence[str],
    version_field: str,
    only_newer: bool,
    commit_conf: dict[str, str],
) -> None:
    """``merge_sql`` of ``source`` (as a temporary view, dropped after) into ``target``, with
    ``commit_conf`` set for this one statement (what the commit carries)."""
    view = f"tidemark_merge_source_{abs(hash(target)) % 10**8}"
    source.createOrReplaceTempView(view)
    statement = merge_sql(
        target, view, key=key, names=names, version_field=version_field, only_newer=only_newer
    )
    try:
        with SessionConf(spark, commit_conf):
            spark.sql(statement).collect()
    finally:
        spark.catalog.dropTempView(view)


class SessionConf:
    """Set session conf for one statement and unset it after (a commit's record and app
    transaction must not leak into the next write of the session)."""

    def __init__(self, spark: SparkSession, values: dict[str, str]) -> None:
        self.spark, self.values = spark, values

    def __enter__(self) -> None:
        for key, value in self.values.items():
            self.spark.conf.set(key, value)

    def __exit__(self, *exc: object) -> None:
        for key in self.values:
            self.spark.conf.unset(key)
