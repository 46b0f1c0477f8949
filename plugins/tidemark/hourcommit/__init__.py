"""How a new version of an hour becomes visible (``base.HourCommit``), one implementation per
kind of warehouse, chosen once per table here: ``renaming`` on a filesystem with rename,
``versioned`` on an object store, ``iceberg`` for an Iceberg table (on either); the snapshot
table's partitions follow the same protocol (``snapshot_commit``). ``versions`` holds the object store's version directories
(owners, markers, the collector), which the snapshot store shares.

``output.layout`` may ask for ``versioned`` on a filesystem too: each version then gets its
own directory and a replaced one stays readable for ``output.version_retention``, for readers
whose queries outlast an amend or a compaction (``in_place`` exchanges the hour's directory,
as Hive's INSERT OVERWRITE does: a query that listed the old files fails on them). A table
keeps the layout its first sealed hour was written in (``layout_problem``)."""

from __future__ import annotations

from collections.abc import Iterable

from tidemark.config import OutputConfig
from tidemark.errors import ConfigError
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
from tidemark.state.layout import Layout, version_dir_of
from tidemark.tablefs import storage_kind

_IMPLEMENTATIONS: dict[str, type[HourCommit]] = {
    "filesystem": RenamingHourCommit,
    "object_store": VersionedHourCommit,
}

_SNAPSHOT_COMMITS: dict[str, type[SnapshotCommit]] = {
    "filesystem": RenamingSnapshotCommit,
    "object_store": VersionedSnapshotCommit,
}


def version_kind(table: str, warehouse_uri: str, output: OutputConfig) -> str:
    """``object_store`` (a directory per version) or ``filesystem`` (one exchanged in place),
    by the warehouse URL and ``output.layout`` (``Layout.kind``: the batch publisher and the
    ``HourCommit`` follow it); in place on an object store is refused."""
    kind = storage_kind(warehouse_uri)
    if output.layout == "in_place" and kind == "object_store":
        raise ConfigError(
            table,
            [
                f"output.layout: in_place needs a filesystem with rename; "
                f"{warehouse_uri} is an object store (use auto or versioned)"
            ],
        )
    return "object_store" if output.layout == "versioned" else kind


def hour_commit(layout: Layout, table_format: str, settings: Settings) -> HourCommit:
    """The table's ``HourCommit``: an Iceberg table's on any store, else by ``layout.kind``."""
    own = _IMPLEMENTATIONS[layout.kind](layout)
    return IcebergHourCommit(layout, settings, own) if table_format == "iceberg" else own


def snapshot_commit(layout: Layout, partition_column: str) -> SnapshotCommit:
    """The snapshot table's ``SnapshotCommit``, by its warehouse URL (a Parquet snapshot's
    labels are written whole by each merge: ``output.layout`` is the hours')."""
    return _SNAPSHOT_COMMITS[storage_kind(layout.warehouse_uri)](layout, partition_column)


def layout_problem(commit: HourCommit, output: OutputConfig, sealed_files: Iterable[str]) -> str | None:
    """Why ``output.layout`` cannot serve a table whose sealed hours hold ``sealed_files``
    (a version directory is ``.../_versions/v...``), or None: an hour's versions are found,
    switched and collected one way, so a table keeps the layout it was sealed in. An Iceberg
    table's hours are its snapshots' files, in version directories on any store."""
    if isinstance(commit, IcebergHourCommit):
        return None
    for name in sealed_files:
        found = "object_store" if version_dir_of(name) is not None else "filesystem"
        if found != commit.layout.kind:
            now = {"object_store": "versioned", "filesystem": "in_place"}[found]
            return (
                f"output.layout: {output.layout}, but the sealed hours are {now} ({name}); set "
                f"output.layout: {now} again (a table keeps the layout it was sealed in)"
            )
        return None
    return None
