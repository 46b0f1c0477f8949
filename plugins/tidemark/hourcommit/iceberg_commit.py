"""The commits of an Iceberg hour table, as calls to its catalog (pyiceberg): no JVM.

An hour's commit adds files tidemark has already written and removes the files the hour had;
no row is read or written, so it needs no engine, only the catalog's API. The seal of a table
that exists therefore starts no Spark (issue 62). Creating the table stays with Iceberg's Java
library in the job's Spark runtime (``iceberg_java``): once per table.

- **commit**: in one transaction, the columns evolved by name where the files bring new or
  wider ones, the name mapping set where they did or where the table has none yet (the files
  carry no field ids; one property update per commit, which Nessie's REST catalog requires),
  then one overwrite snapshot that removes every file of the hour and adds the version's, their
  statistics from each footer, the summary tidemark's record;
- **delete**: one delete snapshot dropping the files of the hours retention drops.

Both are built on the table as the step planned it: the catalog refuses the commit if the
table's ``main`` moved since (the REST spec's ``assert-ref-snapshot-id``, pyiceberg's
``AssertRefSnapshotId``; the table's ``commit.retry.num-retries`` is 0), so a commit of the
hour by anyone since, or any commit in between, fails as a lost race and tidemark plans it
again. A commit whose answer never came (a REST catalog's timeout or 5xx) may have landed:
planned again, the step finds its own commit in the summaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.errors import IcebergCatalogUnavailableError
from tidemark.iceberg_catalog_kind import CatalogKind
from tidemark.masking import mask_text

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table, Transaction

    from tidemark.tablefs import Store

NAME_MAPPING = "schema.name-mapping.default"
MAIN_BRANCH = "main"


class LostRaceError(Exception):
    """Another writer committed first (Iceberg's optimistic concurrency), or the commit's
    answer never came (``unknown``: it may have landed): plan again."""

    def __init__(self, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.unknown = unknown


@dataclass(frozen=True)
class Footer:
    """What a commit needs of one version file, read once: its Arrow schema, its Parquet
    footer (the statistics) and its size."""

    schema: pa.Schema
    metadata: pq.FileMetaData
    size: int


def read_footer(store: Store, relative: str) -> Footer:
    """One file's footer, one read (a commit that loses a race plans again with it)."""
    import pyarrow.parquet as pq

    with store.fs.open_input_file(store.path(relative)) as handle:
        parquet = pq.ParquetFile(handle)
        return Footer(parquet.schema_arrow, parquet.metadata, handle.size())


@dataclass(frozen=True)
class AddedFile:
    """A version's file as the commit adds it: its partition values (``dt``, ``hr`` and the
    data-derived ones, as text), its location as readers address it, and its footer."""

    values: dict[str, str]
    location: str
    footer: Footer


class CatalogCommit:
    """One table's commits through its catalog (see the module)."""

    def __init__(self, kind: CatalogKind, table: str) -> None:
        self.kind = kind
        self.table = table  # tidemark's name, for messages

    def commit(
        self,
        planned: Table,
        *,
        remove: list[DataFile],
        add: list[AddedFile],
        evolve_to: pa.Schema | None,
        summary: dict[str, str],
        branch: str = MAIN_BRANCH,
    ) -> None:
        """Replace ``remove`` (the hour's files in ``planned``) by ``add`` in one snapshot on
        ``branch`` (the fresh read's commits are on a branch of their own: ``fresh``);
        LostRaceError if the table changed since ``planned`` was loaded."""
        try:
            tx = planned.transaction()
            if evolve_to is not None:
                with tx.update_schema() as update:
                    update.union_by_name(evolve_to)
            if evolve_to is not None or NAME_MAPPING not in tx.table_metadata.properties:
                _map_names(tx)
            added = [_data_file(tx, file) for file in add]
            with tx.update_snapshot(snapshot_properties=summary, branch=branch).overwrite() as overwrite:
                for data_file in remove:
                    overwrite.delete_data_file(data_file)
                for data_file in added:
                    overwrite.append_data_file(data_file)
            tx.commit_transaction()
        except Exception as exc:
            raise self._replan_or_name(exc) from exc

    def delete(self, planned: Table, remove: list[DataFile], summary: dict[str, str]) -> None:
        """One delete snapshot dropping ``remove`` (whole files of ``planned``: the hours
        retention drops); LostRaceError if the table changed since ``planned`` was loaded.

        The files are listed, not matched by a predicate: pyiceberg's own delete decides from
        each file's column metrics, and the files hold no ``dt``/``hr`` (their partition
        values are in the manifests), so it would drop nothing."""
        from pyiceberg.table.snapshots import Operation
        from pyiceberg.table.update.snapshot import _OverwriteFiles

        try:
            tx = planned.transaction()
            producer = _OverwriteFiles(
                operation=Operation.DELETE, transaction=tx, io=planned.io, snapshot_properties=summary
            )
            with producer:
                for data_file in remove:
                    producer.delete_data_file(data_file)
            tx.commit_transaction()
        except Exception as exc:
            raise self._replan_or_name(exc) from exc

    def _replan_or_name(self, exc: Exception) -> BaseException:
        """A lost race or an unknown outcome as ``LostRaceError`` (planned again), a refused
        credential or a silent catalog by name, anything else as it is."""
        from pyiceberg.exceptions import (
            CommitFailedException,
            CommitStateUnknownException,
            ValidationException,
        )

        if isinstance(exc, (CommitFailedException, ValidationException)):
            return LostRaceError(f"{type(exc).__name__}: {mask_text(str(exc))}")
        named = self.kind.named(exc, f"committing to {self.table}")
        if isinstance(exc, CommitStateUnknownException) or isinstance(named, IcebergCatalogUnavailableError):
            return LostRaceError(str(named), unknown=True)
        return named


def _map_names(tx: Transaction) -> None:
    """Files carry no Iceberg field ids: readers resolve their columns by name."""
    mapping = tx.table_metadata.schema().name_mapping
    tx.set_properties({NAME_MAPPING: mapping.model_dump_json()})


def _data_file(tx: Transaction, file: AddedFile) -> DataFile:
    """The ``DataFile`` of a version's file: its footer's statistics (Iceberg's metrics
    config, as the Java library reads them), its partition values typed as the table's
    columns."""
    from pyiceberg.expressions.literals import literal
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record
    from pyiceberg.types import StringType

    metadata = tx.table_metadata
    schema = metadata.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=file.footer.metadata,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    values = []
    for field in metadata.spec().fields:
        column = schema.find_field(field.source_id)
        text = file.values[column.name]
        values.append(
            text if isinstance(column.field_type, StringType) else literal(text).to(column.field_type).value
        )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=file.location,
        file_format=FileFormat.PARQUET,
        partition=Record(*values),
        file_size_in_bytes=file.footer.size,
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
