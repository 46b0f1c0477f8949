"""How a new version of an hour becomes visible (``base.HourCommit``), one implementation per
kind of warehouse, chosen once per table here: ``renaming`` on a filesystem with rename,
``versioned`` on an object store, ``iceberg`` for an Iceberg table (on either); the snapshot
table's partitions follow the same protocol (``snapshot_commit``). ``versions`` holds the object store's version directories
(owners, markers, the collector), which the snapshot store shares."""

from __future__ import annotations

from tidemark.hourcommit.base import HourCommit
from tidemark.hourcommit.iceberg import IcebergHourCommit
from tidemark.hourcommit.renaming import RenamingHourCommit
from tidemark.hourcommit.snapshot_commit import (
    RenamingSnapshotCommit,
    SnapshotCommit,
    VersionedSnapshotCommit,
)
from tidemark.hourcommit.versioned import VersionedHourCommit
from tidemark.settings import Settings
from tidemark.state.layout import Layout
from tidemark.tablefs import storage_kind

_IMPLEMENTATIONS: dict[str, type[HourCommit]] = {
    "filesystem": RenamingHourCommit,
    "object_store": VersionedHourCommit,
}

_SNAPSHOT_COMMITS: dict[str, type[SnapshotCommit]] = {
    "filesystem": RenamingSnapshotCommit,
    "object_store": VersionedSnapshotCommit,
}


def hour_commit(layout: Layout, table_format: str, settings: Settings) -> HourCommit:
    """The table's ``HourCommit``: an Iceberg table's on any store, else by its warehouse URL."""
    own = _IMPLEMENTATIONS[storage_kind(layout.warehouse_uri)](layout)
    return IcebergHourCommit(layout, settings, own) if table_format == "iceberg" else own


def snapshot_commit(layout: Layout, partition_column: str) -> SnapshotCommit:
    """The snapshot table's ``SnapshotCommit``, by its warehouse URL."""
    return _SNAPSHOT_COMMITS[storage_kind(layout.warehouse_uri)](layout, partition_column)
