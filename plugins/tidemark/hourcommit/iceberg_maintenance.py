"""An Iceberg table's own upkeep (``IcebergPublication.maintain``; ``seal.maintenance`` runs
it): expire old snapshots, then delete the metadata files no kept snapshot needs.

- **Expire**: snapshots committed more than ``output.version_retention`` ago, by the run's
  data interval end and by the wall clock, whichever is earlier (a late or backfilled run
  expires less, never more; a query that planned on a snapshot in real time keeps it so
  long). No branch's head is expired: not ``main``'s current snapshot (the amend and rebuild
  paths read the hour's current files, and those are its), nor the fresh read's (``fresh``).
- **Orphan metadata**: manifest lists, manifests and metadata files under ``metadata/`` that
  no kept snapshot and no logged metadata version references, older than the retention
  (a commit in flight has written files it does not reference yet: they are minutes old).
- **Data files**: each hour's version directories are deleted by the seal's collector once
  no kept snapshot references them and the retention has passed (``hourcommit.iceberg``):
  expiring here is what lets it.
- **Small files**: none to rewrite: every version of an hour is written compacted to
  ``output.target_file_size`` (the seal, an amend and a rebuild rewrite the whole hour).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tidemark.hourcommit.publication import MaintenanceResult

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable
    from pyiceberg.table.snapshots import Snapshot

    from tidemark.hourcommit.iceberg import IcebergPublication

log = logging.getLogger(__name__)


def expire(publication: IcebergPublication, cutoff: datetime, *, dry_run: bool = False) -> MaintenanceResult:
    """Expire the table's snapshots committed before ``cutoff`` (never the current one) and
    delete its orphan metadata."""
    result = MaintenanceResult(publication.table, cutoff.isoformat(), dry_run=dry_run)
    iceberg = publication.load()
    if iceberg is None:
        log.info("%s: no Iceberg table yet (no hour sealed): nothing to maintain", publication.table)
        return result
    # never a branch's head: main's current snapshot, the fresh read's (``fresh``)
    heads = {ref.snapshot_id for ref in iceberg.metadata.refs.values()}
    cutoff_ms = int(cutoff.timestamp() * 1000)
    result.expired = [
        s.snapshot_id
        for s in iceberg.snapshots()
        if s.timestamp_ms < cutoff_ms and s.snapshot_id not in heads
    ]
    if result.expired and not dry_run:
        iceberg.maintenance.expire_snapshots().by_ids(result.expired).commit()
        iceberg = publication.load() or iceberg
    kept = [s for s in iceberg.snapshots() if s.snapshot_id not in result.expired]
    result.kept = len(kept)
    result.deleted = _orphan_metadata(publication, iceberg, kept, cutoff)
    if not dry_run:
        for relative in result.deleted:
            publication.store.delete(relative)
    return result


def _orphan_metadata(
    publication: IcebergPublication, iceberg: IcebergTable, kept: list[Snapshot], cutoff: datetime
) -> list[str]:
    """Files under ``metadata/`` that nothing ``kept`` references, last written before ``cutoff``."""
    from pyarrow import fs as pafs

    referenced = {
        iceberg.metadata_location,
        *(entry.metadata_file for entry in iceberg.metadata.metadata_log),
    }
    for snapshot in kept:
        referenced.add(snapshot.manifest_list)
        referenced.update(manifest.manifest_path for manifest in snapshot.manifests(iceberg.io))
    names = {publication.relative_of(location) for location in referenced}
    base = publication.layout.relative(publication.layout.table_dir / "metadata")
    store = publication.store
    found = store.fs.get_file_info(pafs.FileSelector(store.path(base), recursive=True, allow_not_found=True))
    root = store.path("").rstrip("/") + "/"
    return sorted(
        relative
        for info in found
        if info.type == pafs.FileType.File
        and (relative := info.path.removeprefix(root)) not in names
        and info.mtime is not None
        and info.mtime.replace(tzinfo=info.mtime.tzinfo or UTC) < cutoff
    )
