"""How a new version of an hour becomes visible, as three small seams composed once per
table (``hour_commit``), none of which a caller asks about:

- **inputs** (``inputs.HourInputs``): where a dump leaves an hour's batch and late files, by
  the layout: ``RenamedInputs`` on a filesystem with rename, ``WrittenOnceInputs`` on an
  object store;
- **versions** (``base.HourVersions``, the storage seam): where a version is drafted,
  completed, revealed and found: ``renaming.RenamingVersions`` renames it into the hour's
  directory, ``versioned.OwnDirectoryVersions`` writes it once in a directory of its own (an
  object store, ``output.layout: versioned``, and every format that points at files);
- **publication** (``publication.HourPublication``, Paimon's ``SnapshotCommit``): how it
  becomes the one readers see, one class per table format: ``HivePublication`` (metastore
  partitions) or ``iceberg.IcebergPublication`` (one snapshot). A new format is one class
  and one line in ``PUBLICATIONS``. The late side table is a Hive table for every format.

The snapshot table's partitions follow the same protocol (``snapshot_commit``). ``versions``
holds the version directories (owners, markers, the collector), which the snapshot store shares.

``output.layout`` may ask for ``versioned`` on a filesystem too: each version then gets its
own directory and a replaced one stays readable for ``output.version_retention``, for readers
whose queries outlast an amend or a compaction (``in_place`` exchanges the hour's directory,
as Hive's INSERT OVERWRITE does: a query that listed the old files fails on them). A table
keeps the layout its first sealed hour was written in (``layout_problem``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tidemark.config import OutputConfig
from tidemark.errors import ConfigError
from tidemark.hourcommit.base import HourVersions
from tidemark.hourcommit.iceberg import IcebergPublication
from tidemark.hourcommit.inputs import HourInputs, RenamedInputs, WrittenOnceInputs
from tidemark.hourcommit.publication import HivePublication, HourPublication
from tidemark.hourcommit.renaming import RenamingVersions
from tidemark.hourcommit.snapshot_commit import (
    RenamingSnapshotCommit,
    SnapshotCommit,
    VersionedSnapshotCommit,
)
from tidemark.hourcommit.versioned import OwnDirectoryVersions
from tidemark.settings import Settings
from tidemark.state.layout import Layout, version_dir_of
from tidemark.tablefs import storage_kind

_INPUTS: dict[str, type[HourInputs]] = {"filesystem": RenamedInputs, "object_store": WrittenOnceInputs}
_VERSIONS: dict[str, type[HourVersions]] = {
    "filesystem": RenamingVersions,
    "object_store": OwnDirectoryVersions,
}
# the table formats (``output.table_format``): a new one is a publication class and a line here
PUBLICATIONS: dict[str, type[HourPublication]] = {"hive": HivePublication, "iceberg": IcebergPublication}

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


@dataclass(frozen=True)
class HourCommit:
    """One table's hours: its inputs, versions and publication, composed once."""

    inputs: HourInputs
    versions: HourVersions
    publication: HourPublication
    late_publication: HourPublication  # the late side table's: Hive partitions


def publication_kind(table_format: str) -> type[HourPublication]:
    """The publication class of ``output.table_format`` (its facets, before a table opens)."""
    return PUBLICATIONS[table_format]


def hour_commit(layout: Layout, table_format: str, settings: Settings, late_table: str) -> HourCommit:
    """The table's seams: inputs by ``layout.kind``; versions by it too, or in directories of
    their own for a format that points at files; the publication by the table format."""
    publication = publication_kind(table_format)
    inputs = _INPUTS[layout.kind](layout)
    kind = "object_store" if publication.own_version_dirs else layout.kind
    versions = _VERSIONS[kind](layout)
    return HourCommit(
        inputs,
        versions,
        publication(layout.table, layout.table_dir, versions, settings),
        HivePublication(late_table, layout.late_dir, versions, settings),
    )


def snapshot_commit(layout: Layout, partition_column: str) -> SnapshotCommit:
    """The snapshot table's ``SnapshotCommit``, by its warehouse URL (a Parquet snapshot's
    labels are written whole by each merge: ``output.layout`` is the hours')."""
    return _SNAPSHOT_COMMITS[storage_kind(layout.warehouse_uri)](layout, partition_column)


def layout_problem(versions: HourVersions, output: OutputConfig, sealed_files: Iterable[str]) -> str | None:
    """Why ``output.layout`` cannot serve a table whose sealed hours hold ``sealed_files``
    (a version directory is ``.../_versions/v...``), or None: an hour's versions are found,
    switched and collected one way, so a table keeps the layout it was sealed in (a format
    that points at files has its versions in directories of their own on any store)."""
    for name in sealed_files:
        found = "object_store" if version_dir_of(name) is not None else "filesystem"
        if (found == "object_store") != versions.own_directories:
            now = {"object_store": "versioned", "filesystem": "in_place"}[found]
            return (
                f"output.layout: {output.layout}, but the sealed hours are {now} ({name}); set "
                f"output.layout: {now} again (a table keeps the layout it was sealed in)"
            )
        return None
    return None
