"""Record-level upserts for CDC snapshots: ``<table>_snapshot`` as one Delta table
(``cdc.snapshot_format: delta``).

Why Delta, through delta-rs (``deltalake``): one MERGE of 1M changes into 10M rows costs
0.07-0.09x today's full Parquet merge and rewrites only the files holding changed keys
(bench/upsert.py, docs/benchmarks.md), and production Spark reads the table with delta-spark
(``VERSION AS OF`` is a snapshot label). pyiceberg's ``upsert`` (one Python expression per
key, ~17 min for 1M rows: apache/iceberg-python#2159) is no candidate at CDC increment sizes.

The model. The Delta table holds the newest state. Each snapshot label is one Delta version:
its record in the snapshot log carries ``delta_version``, and the Delta commit carries the
record in its commitInfo (``tidemark.record``) and an app transaction
(``tidemark-snapshot-<table>``, version = the Delta version it created).

Who writes. The bootstrap's write and the MERGE are one commit each by the table's engine
(``cdc.merge_engine``, ``tidemark.snapshot.delta_engines``: delta-rs in the driver by default,
or delta-spark on the executors); everything else here reads and maintains the table through
delta-rs, whichever engine wrote it.

Exactly once. The Delta commit is the commit point and the snapshot log follows it. A job
that dies between the two leaves a commit the log lacks; every bootstrap and merge first
records such commits (``recover``) under the table's snapshot lock, so the retry of that run
finds its record and does nothing. Delta does not skip a repeated commit by itself: the app
transaction version is the cheap check (the history is read only when it is past the log's
newest Delta version).

Forward only. A merge applies the sealed increment hours to the current version with one
MERGE (delete / update when the change is at least as new / insert): its cost follows the
increment, not the snapshot. A late change (``late_policy: amend``) to an hour that an
earlier version already holds is corrected forward: the next merge of the newest snapshot
recomputes the state from the newest snapshot still current (by time travel) and MERGEs only
the difference. Older versions keep the state as it was merged (history is not rewritten).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import MergeError
from tidemark.faults import crash_point
from tidemark.ingest.columns import arrow_fields
from tidemark.seal.metastore import quote_identifier
from tidemark.settings import Settings
from tidemark.snapshot.delta_engines import DELETE_FLAG, DeltaCommit, commit_metrics, engine_for, record_of
from tidemark.snapshot.delta_views import publish_views
from tidemark.snapshot.snapshots import SnapshotLog, SnapshotRecord, SnapshotStore
from tidemark.state.layout import Layout
from tidemark.state.storage import require_conditional_create
from tidemark.tablefs import delta_storage_options

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

DELTA = "delta"
__all__ = ["DELETE_FLAG", "DeltaSnapshot", "is_delta", "read_snapshot", "snapshot_lock"]


def is_delta(config: TableConfig) -> bool:
    return config.cdc is not None and config.cdc.snapshot_format == DELTA


def snapshot_lock(config: TableConfig, label: str) -> str:
    """The lock a snapshot writer holds: per label for Parquet partitions, one per table for
    the Delta table (every version is written on top of the one before)."""
    return "snapshot-delta" if is_delta(config) else f"snapshot-{label}"


def app_id(table: str) -> str:
    return f"tidemark-snapshot-{table}"


class DeltaSnapshot:
    """The Delta table of a CDC table's snapshots, and how a version of it is committed."""

    def __init__(self, spark: SparkSession, config: TableConfig, settings: Settings) -> None:
        assert config.cdc is not None
        self.spark = spark
        self.config = config
        self.cdc = config.cdc
        self.layout = Layout(settings, config.snapshot_table)
        self.uri = self.layout.uri(self.layout.table_dir)
        self.storage_options = delta_storage_options(self.uri)
        self.store = SnapshotStore(spark, config, settings)
        self.columns = self.store.columns()
        self.names = [name for name, _ in self.columns]
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

    def files(self, version: int) -> list[str]:
        return list(self.table(version).file_uris())

    def read(self, record: SnapshotRecord) -> DataFrame:
        """The state ``record`` names, as Spark reads it without delta-spark: the Parquet
        files of its Delta version (delta-rs writes no deletion vectors; checked)."""
        from pyspark.sql import functions as F

        if record.delta_version < 0:
            raise MergeError(f"{self.config.table}: snapshot {record.ref} is not a Delta version")
        table = self.table(record.delta_version)
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

    # -- the log follows the Delta commits -------------------------------------------------
    def recover(self, snapshots: SnapshotLog) -> list[SnapshotRecord]:
        """Record the Delta commits the snapshot log lacks (their job died after the commit);
        returns what was recorded. Call under the snapshot lock."""
        if not self.exists():
            return []
        records = list(snapshots.records())
        known = max((r.delta_version for r in records), default=-1)
        table = self.table()
        committed = table.transaction_version(app_id(self.config.table))  # 0 is a version, not "none"
        if committed is None or committed <= known:
            return []
        recorded_runs = {r.run_id for r in records}
        recovered = []
        for commit in sorted(table.history(table.version() - known), key=lambda c: int(c["version"])):
            carried = record_of(commit)
            if int(commit["version"]) <= known or carried is None:
                continue
            pending = SnapshotRecord.from_json(carried)
            if pending.run_id in recorded_runs:
                continue
            done = self._finished(pending, int(commit["version"]), commit_metrics(commit))
            recovered.append(snapshots.append(done))
            log.warning(
                "%s: Delta version %s of %s (run %s, snapshot %s) was committed but not recorded "
                "(its job stopped in between): recorded now",
                self.config.table,
                commit["version"],
                self.uri,
                pending.run_id,
                pending.label,
            )
        return recovered

    def head(self, records: Sequence[SnapshotRecord]) -> SnapshotRecord | None:
        """The record of the Delta table's current version (after ``recover``): the one naming
        it, or the newest record when only tidemark's VACUUM committed after it."""
        if not self.exists():
            return None
        table = self.table()
        version = table.version()
        for record in records:
            if record.delta_version == version:
                return record
        newest = max(records, key=lambda r: r.delta_version, default=None)
        if newest is not None and version > newest.delta_version:
            after = table.history(version - newest.delta_version)
            if all(
                str(c.get("operation", "")).startswith("VACUUM")
                for c in after
                if c["version"] > newest.delta_version
            ):
                return newest
        raise MergeError(
            f"{self.config.table}: {self.uri} is at Delta version {version}, which no snapshot record "
            "names (was it written by something other than tidemark?); bootstrap again "
            f"(tidemark bootstrap --table {self.config.table}) to start a new state"
        )

    def kept(self, snapshots: SnapshotLog) -> list[SnapshotRecord]:
        """The labels still readable, oldest first: the newest ``cdc.keep_labels`` live ones
        by Delta version (an older label has expired)."""
        live = sorted(
            (r for r in snapshots.live().values() if r.delta_version >= 0), key=lambda r: r.delta_version
        )
        return live[-self.cdc.keep_labels :]

    def after_commit(self, snapshots: SnapshotLog) -> str:
        """The views of the kept labels, then a VACUUM of what no kept label reads; call under
        the snapshot lock, after the record. Both are derived state and housekeeping, made good
        by the next merge or bootstrap: a failure is logged and returned (``views stale: ...``),
        never the commit's failure."""

        kept = self.kept(snapshots)
        head = self.head(kept)  # the newest record of all: the live one of its label
        if head is None:
            return "no Delta table"
        try:
            crash_point("snapshot_views")
            publish_views(
                self.spark,
                self.config.snapshot_table,
                root=self.uri,
                columns=self.columns,
                head=head,
                live=kept,
            )
        except Exception as exc:  # the metastore's or Spark's (Py4J) refusal: the commit stands
            log.error(
                "%s: snapshot %s is committed (Delta version %s), but its views were not registered: %s "
                "-- readers of %s see the previous version until the next merge registers them",
                self.config.table,
                head.ref,
                head.delta_version,
                str(exc).splitlines()[0][:500],
                self.config.snapshot_table,
            )
            return f"views stale: {type(exc).__name__}"
        self.vacuum(kept)
        return "views registered"

    def vacuum(self, kept: Sequence[SnapshotRecord]) -> list[str]:
        """Delete the files that only expired labels and replaced versions read (a VACUUM
        keeping every kept label's Delta version; no clock involved). Its own two commits carry
        no snapshot record: ``head`` knows them. A failure is logged: the files wait for the
        next merge."""
        table = self.table()
        keep = sorted({r.delta_version for r in kept} | {table.version()})
        try:
            removable = self._vacuum(table, keep, dry_run=True)
            if removable:
                self._vacuum(table, keep, dry_run=False)
                log.info(
                    "%s: VACUUM of %s removed %s file(s) no kept label reads (kept Delta versions %s)",
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

    # -- writing ---------------------------------------------------------------------------
    def overwrite(self, files: Sequence[str], pending: SnapshotRecord) -> SnapshotRecord:
        """A bootstrap: the staged Parquet files (URIs or paths; the bootstrap sorts them by
        key) become the whole state, in files of ``cdc.snapshot_file_size`` (one commit)."""
        self._require_safe_commits()
        version = self.table().version() + 1 if self.exists() else 0
        self.engine.overwrite(files, self.arrow_schema(), self._commit(pending, version))
        return self._finished(pending, self.table().version(), {})

    def merge(self, source: DataFrame, pending: SnapshotRecord, *, only_newer: bool) -> SnapshotRecord:
        """One MERGE of ``source`` (snapshot columns + ``_tm_delete``, one row per key).
        ``only_newer``: a row applies only when its version is at least the target's (the
        increment path); otherwise it applies as is (a difference already computed)."""
        self._require_safe_commits()
        commit = self._commit(pending, self.table().version() + 1)
        metrics = self.engine.merge(source, self.arrow_schema(with_flag=True), commit, only_newer=only_newer)
        log.info(
            "%s: MERGE (%s) into %s: %s source rows, %s inserted, %s updated, %s deleted; %s files rewritten",
            self.config.table,
            self.engine.name,
            self.uri,
            metrics.get("num_source_rows"),
            metrics.get("num_target_rows_inserted"),
            metrics.get("num_target_rows_updated"),
            metrics.get("num_target_rows_deleted"),
            metrics.get("num_target_files_removed"),
        )
        return self._finished(pending, self.table().version(), metrics)

    def _require_safe_commits(self) -> None:
        """Two writers never both commit one Delta version: on S3 every commit is a conditional
        PUT (a paused writer past its lease is fenced by the store only); others: atomic create."""
        require_conditional_create(self.config.table, self.uri)

    @staticmethod
    def _vacuum(table: DeltaTable, keep: list[int], *, dry_run: bool) -> list[str]:
        return list(
            table.vacuum(
                retention_hours=0, dry_run=dry_run, enforce_retention_duration=False, keep_versions=keep
            )
        )

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

    def _finished(self, pending: SnapshotRecord, version: int, metrics: dict[str, Any]) -> SnapshotRecord:
        """The record of a committed version: its rows (counted before a bootstrap; a merge's
        from the rows before and the MERGE's metrics) and its files."""
        rows = pending.rows
        if rows < 0:
            rows = (
                int(pending.changes.get("rows_before", 0))
                + int(metrics.get("num_target_rows_inserted", 0))
                - int(metrics.get("num_target_rows_deleted", 0))
            )
        changes = {
            **pending.changes,
            **{k: int(metrics[m]) for k, m in MERGE_COUNTS.items() if m in metrics},
        }
        names = tuple(sorted(Path(f).name for f in self.files(version)))
        return replace(pending, rows=rows, files=names, delta_version=version, changes=changes)


MERGE_COUNTS = {
    "inserted": "num_target_rows_inserted",
    "updated": "num_target_rows_updated",
    "deleted": "num_target_rows_deleted",
    "files_rewritten": "num_target_files_removed",
}


def read_snapshot(spark: SparkSession, config: TableConfig, settings: Settings, label: str) -> DataFrame:
    """Snapshot ``label`` of a Delta-format table as Spark reads it without delta-spark."""
    snapshots = SnapshotLog(settings.state_location, config.table)
    live, delta = snapshots.live(), DeltaSnapshot(spark, config, settings)
    if label not in live:
        raise MergeError(f"{config.table}: no snapshot {label!r} (tidemark status --table {config.table})")
    if live[label].delta_version not in {r.delta_version for r in delta.kept(snapshots)}:
        raise MergeError(
            f"{config.table}: snapshot {label!r} expired: only the newest cdc.keep_labels "
            f"({delta.cdc.keep_labels}) labels are kept"
        )
    return delta.read(live[label])
