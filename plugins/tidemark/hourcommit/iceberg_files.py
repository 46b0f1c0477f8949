"""An Iceberg table's side of tidemark's files (``hourcommit.iceberg``): the table's schema
from a version's Parquet footers, its evolution, one ``DataFile`` per file (statistics from
the footer, partition values given: the files hold no ``dt``/``hr``), the name mapping that
lets readers resolve files without field ids, and the hour's last commit in the summaries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table, Transaction

    from tidemark.tablefs import Store

PREFIX = "tidemark."  # of the snapshot summary's keys


@dataclass(frozen=True)
class Footer:
    """What a commit needs of one version file, read once: its Arrow schema, its Parquet
    footer (the statistics) and its size."""

    schema: pa.Schema
    metadata: pq.FileMetaData
    size: int


def read_footers(store: Store, relatives: list[str]) -> dict[str, Footer]:
    """Each file's footer, one read each (a commit that loses a race plans again with them)."""
    import pyarrow.parquet as pq

    footers = {}
    for relative in relatives:
        with store.fs.open_input_file(store.path(relative)) as handle:
            parquet = pq.ParquetFile(handle)
            footers[relative] = Footer(parquet.schema_arrow, parquet.metadata, handle.size())
    return footers


def table_schema(footer: Footer, spec: dict[str, str]) -> pa.Schema:
    """The first file's columns, then the partition columns (strings) it lies under."""
    import pyarrow as pa

    missing = [c for c in spec if c not in footer.schema.names]
    return pa.schema([*footer.schema, *(pa.field(c, pa.string()) for c in missing)])


def evolve(tx: Transaction, schema: pa.Schema) -> None:
    """New or widened columns of the files (checked compatible when the job started)."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    current = tx.table_metadata.schema()
    try:  # by the table's ids: raises on a column the table lacks
        new = pyarrow_to_schema(schema, name_mapping=current.name_mapping)
        if all(current.find_field(f.name).field_type == f.field_type for f in new.fields):
            return
    except ValueError:
        pass
    with tx.update_schema() as update:
        update.union_by_name(schema)
    map_names(tx)


def map_names(tx: Transaction) -> None:
    """Files carry no Iceberg field ids: readers resolve their columns by name."""
    mapping = tx.table_metadata.schema().name_mapping
    tx.set_properties({"schema.name-mapping.default": mapping.model_dump_json()})


def data_file_of(footer: Footer, tx: Transaction, spec: dict[str, str], location: str) -> DataFile:
    """The ``DataFile`` of a version's file: its footer's statistics, the partition values of
    ``spec`` (its hour and data-derived values), ``location`` as readers address it."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    metadata = tx.table_metadata
    schema = metadata.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer.metadata,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    partition = metadata.spec()
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(*(spec[schema.find_column_name(f.source_id) or ""] for f in partition.fields)),
        file_size_in_bytes=footer.size,
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )


def last_hour_commit(table: Table, hour_key: str) -> dict[str, str] | None:
    """The summary of the newest snapshot (of the current one's ancestry) that committed the
    hour; None if none did (or it expired: nothing of the hour's history is left)."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
        if summary.get(f"{PREFIX}hour") == hour_key:
            return summary
    return None
