"""CDC snapshots as one Delta table (``cdc.snapshot_format: delta``): the Delta side of
``tidemark.snapshot.versioned`` (the model, recovery and forward-only merges are there).

Why Delta, through delta-rs (``deltalake``): one MERGE of 1M changes into 10M rows costs
0.07-0.09x today's full Parquet merge and rewrites only the files holding changed keys
(bench/upsert.py, docs/benchmarks.md), and production Spark reads the table with delta-spark
(``VERSION AS OF`` is a snapshot label). pyiceberg's ``upsert`` (one Python expression per
key, ~17 min for 1M rows: apache/iceberg-python#2159) is no candidate at CDC increment sizes;
Iceberg snapshots MERGE with Spark (``tidemark.snapshot.iceberg_snapshot``).

Each Delta commit carries the record in its ``userMetadata`` (``tidemark.record``, beside the
label, so ``DESCRIBE HISTORY`` shows which version holds which label) and an app
transaction (``tidemark-snapshot-<table>``, version = the Delta version it created): Delta
does not skip a repeated commit by itself, and the app transaction is the cheap check of
``recover`` (the history is read only when it is past the log's newest Delta version).

Who writes. The bootstrap's write and the MERGE are one commit each by the table's engine
(``cdc.merge_engine``, ``tidemark.snapshot.delta_engines``: delta-rs in the driver by default,
or delta-spark on the executors); everything else here reads and maintains the table through
delta-rs, whichever engine wrote it. The table is registered in the metastore as a Delta
table (``tidemark.snapshot.delta_catalog``): read by name natively, a label by ``VERSION AS
OF`` its Delta version.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.config.columns import arrow_fields
from tidemark.errors import MergeError
from tidemark.seal.metastore import quote_identifier
from tidemark.settings import Settings
from tidemark.snapshot.delta_catalog import register_delta_table
from tidemark.snapshot.delta_engines import DeltaCommit, commit_metrics, engine_for, record_of
from tidemark.snapshot.snapshots import SnapshotRecord
from tidemark.snapshot.versioned import DELETE_FLAG, TableCommit, VersionedSnapshot
from tidemark.state.storage import require_conditional_create
from tidemark.tablefs import delta_storage_options

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

DELTA = "delta"
__all__ = ["DELETE_FLAG", "DeltaSnapshot", "is_delta"]


def is_delta(config: TableConfig) -> bool:
    return config.cdc is not None and config.cdc.snapshot_format == DELTA


def app_id(table: str) -> str:
    return f"tidemark-snapshot-{table}"


class DeltaSnapshot(VersionedSnapshot):
    """The Delta table of a CDC table's snapshots, through delta-rs and the table's engine."""

    def __init__(self, spark: SparkSession, config: TableConfig, settings: Settings) -> None:
        super().__init__(spark, config, settings)
        self.storage_options = delta_storage_options(self.uri)
        self.engine = engine_for(self.cdc.merge_engine, spark)

    # -- reading ---------------------------------------------------------------------------
    def arrow_schema(self, *, with_flag: bool = False) -> pa.Schema:
        import pyarrow as pa

        fields = arrow_fields(self.columns)
        return pa.schema([*fields, pa.field(DELETE_FLAG, pa.bool_())] if with_flag else fields)

    def exists(self) -> bool:
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(self.uri, self.storage_options))

    def table(self, version: int | None = None) -> DeltaTable:
        from deltalake import DeltaTable

        return DeltaTable(self.uri, version=version, storage_options=self.storage_options)

    def current_version(self) -> int:
        return int(self.table().version())

    def files(self, version: int) -> list[str]:
        return list(self.table(version).file_uris())

    def read(self, record: SnapshotRecord) -> DataFrame:
        """The state ``record`` names, as Spark reads it without delta-spark: the Parquet
        files of its Delta version (delta-rs writes no deletion vectors; checked)."""
        from pyspark.sql import functions as F

        if record.table_version < 0:
            raise MergeError(f"{self.config.table}: snapshot {record.ref} is not a Delta version")
        table = self.table(record.table_version)
        if table.protocol().reader_features:
            raise MergeError(
                f"{self.config.table}: {self.uri} uses Delta reader features "
                f"{table.protocol().reader_features}: read it with delta-spark"
            )
        ddl = self.store.schema_ddl()
        files = list(table.file_uris())
        if not files:
            return self.spark.createDataFrame([], ddl)
        from tidemark.sparkfiles import read_parquet_files

        frame = read_parquet_files(self.spark, files, ddl)
        return frame.select(*(F.col(quote_identifier(n)) for n in self.names))

    def may_have_unrecorded(self, known: int) -> bool:
        committed = self.table().transaction_version(app_id(self.config.table))  # 0 is a version
        return committed is not None and committed > known

    def commits_after(self, version: int) -> list[TableCommit]:
        table = self.table()
        history = table.history(table.version() - version) if table.version() > version else []
        return [
            TableCommit(
                version=int(c["version"]),
                record=record_of(c),
                metrics=commit_metrics(c),
                maintenance=str(c.get("operation", "")).startswith(("VACUUM", "OPTIMIZE")),
            )
            for c in sorted(history, key=lambda c: int(c["version"]))
            if int(c["version"]) > version
        ]

    def data_file_sizes(self) -> list[int]:
        import pyarrow as pa

        return [
            int(n)
            for n in pa.table(self.table().get_add_actions(flatten=True)).column("size_bytes").to_pylist()
        ]

    def rewrite_files(self) -> None:
        self._require_safe_commits()
        self.table().optimize.compact(target_size=int(self.cdc.snapshot_file_size))

    # -- labels and housekeeping -------------------------------------------------------------
    def publish(self, head: SnapshotRecord, kept: Sequence[SnapshotRecord]) -> str:
        """The table by name in the metastore; its labels are Delta versions whose commits
        name them, so nothing per label is published."""
        return register_delta_table(self.spark, self.config.snapshot_table, self.uri, table=self.config.table)

    def vacuum(self, kept: Sequence[SnapshotRecord]) -> list[str]:
        """Delete the files that no version in ``kept`` reads (a VACUUM keeping those Delta
        versions and the current one; the grace is in which versions ``kept`` holds, so
        Delta's own clock-based retention is off). Its own two commits carry
        no snapshot record: ``head`` knows them. A failure is logged: the files wait for the
        next merge."""
        table = self.table()
        keep = sorted({r.table_version for r in kept} | {table.version()})
        try:
            removable = self._vacuum(table, keep, dry_run=True)
            if removable:
                self._vacuum(table, keep, dry_run=False)
                log.info(
                    "%s: VACUUM of %s removed %s file(s) no readable label reads (kept Delta versions %s)",
                    self.config.table,
                    self.uri,
                    len(removable),
                    keep,
                )
        except Exception as exc:  # delta-rs' or the store's error: housekeeping waits, nothing is lost
            log.warning(
                "%s: VACUUM of %s failed, retried by the next merge: %s", self.config.table, self.uri, exc
            )
            return []
        return list(removable)

    @staticmethod
    def _vacuum(table: DeltaTable, keep: list[int], *, dry_run: bool) -> list[str]:
        return list(
            table.vacuum(
                retention_hours=0, dry_run=dry_run, enforce_retention_duration=False, keep_versions=keep
            )
        )

    # -- writing ---------------------------------------------------------------------------
    def write_overwrite(self, files: Sequence[str], pending: SnapshotRecord, version: int) -> None:
        self._require_safe_commits()
        self.engine.overwrite(files, self.arrow_schema(), self._commit(pending, version))

    def write_merge(
        self, source: DataFrame, pending: SnapshotRecord, version: int, *, only_newer: bool
    ) -> dict[str, Any]:
        self._require_safe_commits()
        commit = self._commit(pending, version)
        return self.engine.merge(source, self.arrow_schema(with_flag=True), commit, only_newer=only_newer)

    def _require_safe_commits(self) -> None:
        """Two writers never both commit one Delta version: on S3 every commit is a conditional
        PUT (a paused writer past its lease is fenced by the store only); others: atomic create."""
        require_conditional_create(self.config.table, self.uri)

    def _commit(self, pending: SnapshotRecord, version: int) -> DeltaCommit:
        return DeltaCommit(
            table=self.config.table,
            uri=self.uri,
            version=version,
            app_id=app_id(self.config.table),
            record=pending.to_json(),
            columns=tuple(self.columns),
            key=tuple(self.config.primary_key),
            version_field=self.cdc.version_field,
            file_size=int(self.cdc.snapshot_file_size),
        )
