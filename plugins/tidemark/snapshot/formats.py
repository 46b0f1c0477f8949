"""Which snapshot table a CDC table has (``cdc.snapshot_format``), chosen once: the per-label
Parquet partitions (``tidemark.snapshot.snapshots``) or one versioned table, Delta or Iceberg
(``tidemark.snapshot.versioned``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config import TableConfig
from tidemark.errors import MergeError
from tidemark.settings import Settings
from tidemark.snapshot.delta import DeltaSnapshot
from tidemark.snapshot.iceberg_snapshot import IcebergSnapshot
from tidemark.snapshot.snapshots import SnapshotLog, is_versioned
from tidemark.snapshot.versioned import VersionedSnapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["is_versioned", "open_versioned", "read_snapshot", "snapshot_lock"]


def open_versioned(spark: SparkSession, config: TableConfig, settings: Settings) -> VersionedSnapshot:
    """The Delta or Iceberg snapshot table of ``config`` (``is_versioned``)."""
    assert config.cdc is not None and is_versioned(config), config.table
    if config.cdc.snapshot_format == "iceberg":
        return IcebergSnapshot(spark, config, settings)
    return DeltaSnapshot(spark, config, settings)


def snapshot_lock(config: TableConfig, label: str) -> str:
    """The lock a snapshot writer holds: per label for Parquet partitions, one per table for
    a versioned table (every version is written on top of the one before). The name stays
    ``snapshot-delta`` for both formats: a table never changes its format."""
    return "snapshot-delta" if is_versioned(config) else f"snapshot-{label}"


def read_snapshot(spark: SparkSession, config: TableConfig, settings: Settings, label: str) -> DataFrame:
    """Snapshot ``label`` of a Delta- or Iceberg-format table (a kept label)."""
    snapshots = SnapshotLog(settings.state_location, config.table)
    live, table = snapshots.live(), open_versioned(spark, config, settings)
    if label not in live:
        raise MergeError(f"{config.table}: no snapshot {label!r} (tidemark status --table {config.table})")
    if live[label].table_version not in {r.table_version for r in table.kept(snapshots)}:
        raise MergeError(
            f"{config.table}: snapshot {label!r} expired: only the newest cdc.keep_labels "
            f"({table.cdc.keep_labels}) labels are kept"
        )
    return table.read(live[label])
