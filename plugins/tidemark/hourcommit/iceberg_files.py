"""An Iceberg table's side of tidemark's files (``hourcommit.iceberg``), read with pyiceberg:
the table's schema from a version's Parquet footer (partition values are given: the files
hold no ``dt``/``hr``), whether it evolves the table's, and the hour's last commit in the
snapshot summaries."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

    from tidemark.tablefs import Store

PREFIX = "tidemark."  # of the snapshot summary's keys
_NAMED = re.compile(r"/v(\d+)-b(\d+)(?:-[0-9a-f]{8})?$")


def version_of(directory: str) -> tuple[int, int]:
    """(version, through batch) of a version directory's name; (0, -1) for another name."""
    match = _NAMED.search(directory)
    return (int(match.group(1)), int(match.group(2))) if match else (0, -1)


def read_schema(store: Store, relative: str) -> pa.Schema:
    """A version file's columns, from its footer (the commit's statistics are Iceberg's to read)."""
    import pyarrow.parquet as pq

    with store.fs.open_input_file(store.path(relative)) as handle:
        return pq.ParquetFile(handle).schema_arrow


def table_schema(schema: pa.Schema, spec: dict[str, str]) -> pa.Schema:
    """The first file's columns, then the partition columns (strings) it lies under."""
    import pyarrow as pa

    missing = [c for c in spec if c not in schema.names]
    return pa.schema([*schema, *(pa.field(c, pa.string()) for c in missing)])


def needs_evolution(table: Table, schema: pa.Schema) -> bool:
    """Whether the files bring columns the table lacks or wider types (checked compatible when
    the job started)."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    current = table.schema()
    try:  # by the table's ids: raises on a column the table lacks
        new = pyarrow_to_schema(schema, name_mapping=current.name_mapping)
    except ValueError:
        return True
    return not all(current.find_field(f.name).field_type == f.field_type for f in new.fields)


def last_hour_commit(table: Table, hour_key: str) -> dict[str, str] | None:
    """The summary of the newest snapshot (of the current one's ancestry) that committed the
    hour; None if none did (or it expired: nothing of the hour's history is left)."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
        if summary.get(f"{PREFIX}hour") == hour_key:
            return summary
    return None
