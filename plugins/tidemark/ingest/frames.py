"""A batch's classified records as one frame (the Spark paths: tables with data-derived
partition columns, replays and rebuilds): one row per record, good or dirty, and the way back
to good rows and dirty records for the task-side stager."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config.columns import (
    DIRTY_FIELDS,
    LINEAGE_FIELDS,
    RAW_FIELDS,
    VERDICT_FIELDS,
    arrow_fields,
)
from tidemark.ingest.spec import Classified, ClassifySpec, good_schema

if TYPE_CHECKING:
    import pyarrow as pa


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


def split_classified(table: pa.Table, spec: ClassifySpec) -> Classified:
    """The inverse of :func:`as_classified`: a classified frame's rows (a task's Arrow batch)
    as good rows and dirty records again, for the stager (``staging.TaskStager``)."""
    import pyarrow.compute as pc

    dirty = pc.is_valid(table["_reason"])
    good = table.filter(pc.invert(dirty)).select([f.name for f in good_schema(spec, raw=False)])
    bad = table.filter(dirty)
    records = bad.select([source for _, _, source in DIRTY_FIELDS]).rename_columns(
        [name for name, _, _ in DIRTY_FIELDS]
    )
    return Classified(good, records)
