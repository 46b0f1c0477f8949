"""A batch's classified records as one frame (the Spark paths: tables with data-derived
partition columns, and rebuilds): one row per record, good or dirty, and the selections of the
table's rows, late rows and dirty records from it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.ingest.columns import (
    DIRTY_FIELDS,
    LINEAGE_FIELDS,
    RAW_FIELDS,
    VERDICT_FIELDS,
    arrow_fields,
    table_columns,
)
from tidemark.ingest.counts import StagedCount
from tidemark.ingest.spec import Classified, ClassifySpec, good_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from tidemark.config import TableConfig


def classified_schema(spec: ClassifySpec) -> pa.Schema:
    """One row per record: the good schema with raw bytes, plus reason, detail and lineage
    (typed columns are null in dirty rows)."""
    import pyarrow as pa

    return pa.schema([*good_schema(spec, raw=True), *arrow_fields(VERDICT_FIELDS)])


def classified_ddl(spec: ClassifySpec) -> str:
    """The Spark DDL of :func:`classified_schema` (a data source declares its schema so)."""
    typed = [(f"`{name}`", ddl.removesuffix(" not null")) for name, ddl in spec.columns]
    fields = [*typed, *LINEAGE_FIELDS, *RAW_FIELDS, *VERDICT_FIELDS]
    return ", ".join(f"{name} {ddl}" for name, ddl in fields)


def as_classified(block: Classified, spec: ClassifySpec) -> pa.Table:
    """Good and dirty rows of a block in :func:`classified_schema`."""
    import pyarrow as pa

    schema = classified_schema(spec)
    good = block.good
    n_good = good.num_rows
    columns: dict[str, pa.Array] = {}
    for field in schema:
        if field.name in good.column_names:
            columns[field.name] = good.column(field.name).combine_chunks()
        else:
            columns[field.name] = pa.nulls(n_good, field.type)
    columns["_topic"] = pa.array([spec.topic] * n_good, pa.string())
    columns["_run_id"] = pa.array([spec.run_id] * n_good, pa.string())
    good_part = pa.Table.from_pydict(columns, schema=schema)
    d = block.dirty
    n_dirty = d.num_rows
    dirty_columns = {field.name: pa.nulls(n_dirty, field.type) for field in schema}
    dirty_columns["_late"] = pa.array([False] * n_dirty, pa.bool_())
    for name, _, source in DIRTY_FIELDS:
        dirty_columns[source] = d.column(name).combine_chunks()
    return pa.concat_tables([good_part, pa.Table.from_pydict(dirty_columns, schema=schema)])


# Selections of a classified DataFrame --------------------------------------------------------


def good_rows(classified: DataFrame, config: TableConfig) -> DataFrame:
    """Rows of the table: schema columns, MQ lineage columns and the hour partition columns."""
    from pyspark.sql import functions as F

    return classified.where(F.col("_reason").isNull() & ~F.col("_late")).select(*table_columns(config))


def late_rows(classified: DataFrame, config: TableConfig) -> DataFrame:
    """Valid rows of hours sealed before the batch was planned, with the table's columns."""
    from pyspark.sql import functions as F

    return classified.where(F.col("_reason").isNull() & F.col("_late")).select(*table_columns(config))


def dirty_rows(classified: DataFrame) -> DataFrame:
    """Rows of ``<table>__dirty``: raw bytes, reason code and where the record came from."""
    from pyspark.sql import functions as F

    return classified.where(F.col("_reason").isNotNull()).select(
        *(F.col(source).alias(name) for name, _, source in DIRTY_FIELDS)
    )


def staged_counts(classified: DataFrame, config: TableConfig) -> list[StagedCount]:
    """What the Spark path staged, counted as the read tasks count theirs
    (``staging.TaskStager.counts``), in one aggregation pass over a handful of groups."""
    from pyspark.sql import functions as F

    ts = F.col(config.event_time.field)
    groups = (
        classified.groupBy("_mq_partition", "dt", "hr", "_late", "_reason")
        .agg(F.count(F.lit(1)).alias("n"), F.min(ts).alias("min_ts"), F.max(ts).alias("max_ts"))
        .collect()
    )
    return [
        StagedCount(
            mq_partition=g["_mq_partition"],
            dt=g["dt"],
            hr=g["hr"],
            late=bool(g["_late"]),
            reason=g["_reason"],
            n=int(g["n"]),
            min_ts=g["min_ts"],
            max_ts=g["max_ts"],
        )
        for g in groups
    ]
