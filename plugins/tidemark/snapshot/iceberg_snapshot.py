"""CDC snapshots as one Iceberg table (``cdc.snapshot_format: iceberg``): the Iceberg side of
``tidemark.snapshot.versioned`` (the model, recovery and forward-only merges are there).

The table is ``<catalog>.default.<table>_snapshot`` in tidemark's Iceberg catalog (the SQL or
REST catalog of ``output.table_format: iceberg``, ``tidemark.iceberg_catalog``); its current
snapshot is the newest state and every kept label is an Iceberg **tag** of the same name, so
any Iceberg reader reads a label by name: ``SELECT ... FROM iceberg.default.orders_snapshot
VERSION AS OF '2026-11-22T11'`` (Spark, Trino ``FOR VERSION AS OF``), pyiceberg's
``scan(snapshot_id=table.snapshot_by_name(label))``.

Who writes. Spark, with Iceberg's runtime in the job's session (``tidemark.iceberg_catalog.
snapshot_session_conf``): the bootstrap's overwrite and ``MERGE INTO`` run on the executors,
so a snapshot bigger than one machine merges where the cluster is. Each commit carries the
snapshot record in its summary (``tidemark.record``, through Iceberg's session conf
``spark.sql.iceberg.snapshot-property.*``, set for one statement). The version a record
names is the snapshot's sequence number (one per commit of a format-2 table).

Exactly once. The catalog commits by a conditional update of the table's metadata location,
on any store (S3 included): two writers never both commit on one base. The table is created
with ``commit.retry.num-retries=0``, so a writer whose base moved fails instead of retrying
on top (one writer under the snapshot lock; a zombie's MERGE is refused, not applied twice).
Metadata (recovery, labels, expiry) is read with pyiceberg, no JVM needed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import MergeError
from tidemark.iceberg_catalog import catalog_kind, identifier, open_catalog
from tidemark.seal.metastore import quote_identifier
from tidemark.settings import Settings
from tidemark.snapshot.snapshots import SnapshotRecord
from tidemark.snapshot.spark_merge import SessionConf, run_merge, staged_frame
from tidemark.snapshot.versioned import RECORD_KEY, TableCommit, VersionedSnapshot
from tidemark.tablefs import hadoop_uri

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

PROPERTY_CONF = "spark.sql.iceberg.snapshot-property."
# Spark's MERGE metrics in the snapshot summary (Iceberg 1.11+), in delta-rs' names
SUMMARY_METRICS = {
    "spark.merge-into.num-target-rows-inserted": "num_target_rows_inserted",
    "spark.merge-into.num-target-rows-updated": "num_target_rows_updated",
    "spark.merge-into.num-target-rows-deleted": "num_target_rows_deleted",
    "deleted-data-files": "num_target_files_removed",
    "added-data-files": "num_target_files_added",
    "added-delete-files": "num_delete_files_added",  # merge-on-read: deletion vectors, position deletes
}


def summary_of(snapshot: Snapshot) -> dict[str, str]:
    return dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {}


def _operation(snapshot: Snapshot) -> str:
    return str(snapshot.summary.operation.value) if snapshot.summary is not None else ""


def record_in(snapshot: Snapshot) -> dict[str, Any] | None:
    raw = summary_of(snapshot).get(RECORD_KEY)
    return json.loads(raw) if raw else None


class IcebergSnapshot(VersionedSnapshot):
    """The Iceberg table of a CDC table's snapshots: written by Spark, read by name."""

    def __init__(self, spark: SparkSession, config: TableConfig, settings: Settings) -> None:
        super().__init__(spark, config, settings)
        self.catalog = open_catalog(settings)
        self.identifier = identifier(config.snapshot_table)
        self.name = f"{settings.iceberg_catalog}.{self.identifier}"
        kind = catalog_kind(settings)
        url = kind.java_properties()["uri"]
        if spark.conf.get(f"spark.sql.catalog.{settings.iceberg_catalog}.uri", None) != url:
            raise MergeError(
                f"{config.table}: this Spark session has no Iceberg catalog {settings.iceberg_catalog!r} on "
                f"{kind.describe()}: cdc.snapshot_format: iceberg needs a session built "
                "with tidemark.jobs.table_session_conf (spark-submit through tidemark's jobs does)"
            )

    # -- reading ---------------------------------------------------------------------------
    def exists(self) -> bool:
        return bool(self.catalog.table_exists(self.identifier))

    def table(self) -> Table:
        return self.catalog.load_table(self.identifier)

    def current_version(self) -> int:
        current = self.table().current_snapshot()
        return int(current.sequence_number or 0) if current is not None else 0

    def snapshot_at(self, version: int, table: Table | None = None) -> Snapshot:
        table = table or self.table()
        for snapshot in table.snapshots():
            if snapshot.sequence_number == version:
                return snapshot
        raise MergeError(
            f"{self.config.table}: {self.name} has no snapshot with sequence number {version} "
            f"(expired?): bootstrap again (tidemark bootstrap --table {self.config.table})"
        )

    def files(self, version: int) -> list[str]:
        table = self.table()
        snapshot_id = self.snapshot_at(version, table).snapshot_id
        return [task.file.file_path for task in table.scan(snapshot_id=snapshot_id).plan_files()]

    def read(self, record: SnapshotRecord) -> DataFrame:
        from pyspark.sql import functions as F

        snapshot_id = self.snapshot_at(record.table_version).snapshot_id
        frame = self.spark.read.option("versionAsOf", str(snapshot_id)).table(self.name)
        return frame.select(*(F.col(quote_identifier(n)) for n in self.names))

    def commits_after(self, version: int) -> list[TableCommit]:
        table = self.table()
        later = sorted(
            (s for s in table.snapshots() if (s.sequence_number or 0) > version),
            key=lambda s: s.sequence_number or 0,
        )
        return [
            TableCommit(
                version=int(s.sequence_number or 0),
                record=record_in(s),
                metrics=self._metrics(summary_of(s)),
                maintenance=record_in(s) is None and _operation(s) == "replace",  # a compaction
            )
            for s in later
        ]

    @staticmethod
    def _metrics(summary: dict[str, str]) -> dict[str, Any]:
        return {name: int(summary[key]) for key, name in SUMMARY_METRICS.items() if key in summary}

    def data_file_sizes(self) -> list[int]:
        return [int(task.file.file_size_in_bytes) for task in self.table().scan().plan_files()]

    def rewrite_files(self) -> None:
        catalog = self.name.split(".", 1)[0]
        size = int(self.cdc.snapshot_file_size)
        self.spark.sql(
            f"CALL {catalog}.system.rewrite_data_files(table => '{self.identifier}', options => "
            f"map('target-file-size-bytes', '{size}', 'min-input-files', '2'))"
        ).collect()

    # -- labels and housekeeping -------------------------------------------------------------
    def publish(self, head: SnapshotRecord, kept: Sequence[SnapshotRecord]) -> str:
        """Every kept label a tag on its snapshot (moved when the label has a new version),
        tidemark's tags of expired labels (a tag whose snapshot carries a record of that
        label) removed: one metadata commit, so a reader never finds a kept label missing."""
        table = self.table()
        wanted = {r.label: self.snapshot_at(r.table_version, table).snapshot_id for r in kept}
        tags = {
            name: ref.snapshot_id
            for name, ref in table.metadata.refs.items()
            if ref.snapshot_ref_type == "tag"
        }
        expired = {
            name
            for name, snapshot_id in tags.items()
            if name not in wanted
            and (s := table.snapshot_by_id(snapshot_id)) is not None
            and (record_in(s) or {}).get("label") == name
        }
        moved = {n: i for n, i in wanted.items() if tags.get(n) != i}
        if (expired or moved) and table.format_version >= 3:
            self._retag_in_spark(expired, moved)  # pyiceberg 0.12 writes no format-3 metadata
        elif expired or moved:
            with table.manage_snapshots() as refs:
                for name in sorted(expired):
                    refs.remove_tag(name)
                for name, snapshot_id in sorted(moved.items()):
                    refs.create_tag(snapshot_id, name)  # replaces the tag of that name
        log.info(
            "%s: %s tags %s (current: %s, sequence number %s)",
            self.config.table,
            self.name,
            ", ".join(sorted(wanted)),
            head.ref,
            head.table_version,
        )
        return "tags published"

    def _retag_in_spark(self, expired: set[str], moved: dict[str, int]) -> None:
        """The same through Iceberg's Spark DDL, one commit per tag: each kept label's tag is
        replaced in place (never dropped first), so no reader finds it missing either."""
        for name, snapshot_id in sorted(moved.items()):
            self.spark.sql(
                f"ALTER TABLE {self.name} CREATE OR REPLACE TAG {quote_identifier(name)} AS OF VERSION {snapshot_id}"
            )
        for name in sorted(expired):
            self.spark.sql(f"ALTER TABLE {self.name} DROP TAG IF EXISTS {quote_identifier(name)}")

    def vacuum(self, kept: Sequence[SnapshotRecord]) -> list[str]:
        """Expire the snapshots that no record in ``kept`` (readable within the grace), no tag
        or branch and not the current one names, and delete their files (Iceberg's ``expire_snapshots`` procedure: files a kept snapshot
        shares stay)."""
        table = self.table()
        keep = {r.table_version for r in kept} | {self.current_version()}
        referenced = {ref.snapshot_id for ref in table.metadata.refs.values()}  # your own tags too
        expired = [
            str(s.snapshot_id)
            for s in table.snapshots()
            if (s.sequence_number or 0) not in keep and s.snapshot_id not in referenced
        ]
        if not expired:
            return []
        catalog = self.name.split(".", 1)[0]
        try:
            ids = ", ".join(f"{i}L" for i in expired)
            self.spark.sql(
                f"CALL {catalog}.system.expire_snapshots(table => '{self.identifier}', snapshot_ids => array({ids}))"
            ).collect()
        except Exception as exc:  # Spark's or the store's error: housekeeping waits, nothing is lost
            log.warning(
                "%s: expiring %s snapshot(s) of %s failed, retried by the next merge: %s",
                self.config.table,
                len(expired),
                self.name,
                str(exc).splitlines()[0][:500],
            )
            return []
        log.info(
            "%s: %s snapshot(s) of %s no readable label reads expired",
            self.config.table,
            len(expired),
            self.name,
        )
        return expired

    # -- writing ---------------------------------------------------------------------------
    def write_overwrite(self, files: Sequence[str], pending: SnapshotRecord, version: int) -> None:
        from pyspark.sql import functions as F

        self._create()
        frame = staged_frame(self.spark, files, self.columns, int(self.cdc.snapshot_file_size))
        expected = self.current_version() + 1
        with SessionConf(self.spark, self._carrying(pending)):
            frame.writeTo(self.name).overwrite(F.lit(True))
        self._landed(pending, expected)

    def write_merge(
        self, source: DataFrame, pending: SnapshotRecord, version: int, *, only_newer: bool
    ) -> dict[str, Any]:
        self._settle_merge_mode()
        run_merge(
            self.spark,
            source,
            self.name,
            key=self.config.primary_key,
            names=self.names,
            version_field=self.cdc.version_field,
            only_newer=only_newer,
            commit_conf=self._carrying(pending),
        )
        return self._metrics(summary_of(self._landed(pending, version)))

    def _create(self) -> None:
        """The table, once (Spark's DDL: the snapshot's Spark types as Iceberg's), in the
        format and merge mode of ``cdc`` (``tidemark.config.cdc``)."""
        if self.exists():
            return
        columns = ", ".join(f"{quote_identifier(n)} {t}" for n, t in self.columns)
        properties = {
            "format-version": str(self.cdc.iceberg_format_version),
            "commit.retry.num-retries": "0",
            "write.target-file-size-bytes": str(int(self.cdc.snapshot_file_size)),
            **self._merge_mode(),
        }
        self.spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.name} ({columns}) USING iceberg "
            f"LOCATION '{hadoop_uri(self.uri)}' TBLPROPERTIES ({_properties_sql(properties)})"
        )
        log.info(
            "%s: Iceberg snapshot table %s (format %s, %s) created at %s",
            self.config.table,
            self.name,
            self.cdc.iceberg_format_version,
            self.cdc.merge_mode,
            self.uri,
        )

    def _merge_mode(self) -> dict[str, str]:
        return {f"write.{op}.mode": self.cdc.merge_mode for op in ("merge", "update", "delete")}

    def _settle_merge_mode(self) -> None:
        """``cdc.merge_mode`` on the table before its MERGE (a table property, changed freely);
        its format version is a new table's (an upgrade is the operator's ``ALTER TABLE``)."""
        table = self.table()
        wanted = self._merge_mode()
        if any(table.properties.get(k) != v for k, v in wanted.items()):
            self.spark.sql(f"ALTER TABLE {self.name} SET TBLPROPERTIES ({_properties_sql(wanted)})")
            log.info("%s: %s now merges %s", self.config.table, self.name, self.cdc.merge_mode)
        if table.format_version != self.cdc.iceberg_format_version:
            log.warning(
                "%s: %s is Iceberg format %s, cdc.iceberg_format_version says %s: the setting is a new "
                "table's (upgrade with ALTER TABLE %s SET TBLPROPERTIES ('format-version' = '3'); no "
                "table goes back)",
                self.config.table,
                self.name,
                table.format_version,
                self.cdc.iceberg_format_version,
                self.name,
            )

    @staticmethod
    def _carrying(pending: SnapshotRecord) -> dict[str, str]:
        """The session conf that puts the record in the commit's summary."""
        return {PROPERTY_CONF + RECORD_KEY: json.dumps(pending.to_json(), sort_keys=True)}

    def _landed(self, pending: SnapshotRecord, version: int) -> Snapshot:
        """The commit's snapshot, once it is the current one at ``version`` and carries
        ``pending``; else a MergeError (another writer's commit), never recorded."""
        current = self.table().current_snapshot()
        found = record_in(current) if current is not None else None
        if (
            current is None
            or current.sequence_number != version
            or json.dumps(found, sort_keys=True) != json.dumps(pending.to_json(), sort_keys=True)
        ):
            raise MergeError(
                f"{self.config.table}: the commit of snapshot {pending.label} (run {pending.run_id}) to "
                f"{self.name} did not land as sequence number {version} (the table is at "
                f"{current.sequence_number if current else 'none'}): another writer; nothing is recorded, "
                "retry the task"
            )
        return current


def _properties_sql(properties: dict[str, str]) -> str:
    return ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
