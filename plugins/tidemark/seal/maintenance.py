"""Maintenance of an Iceberg table (``tidemark_maintain_<table>``, daily; ``tidemark maintain``):
expire old snapshots, then delete the metadata files no kept snapshot needs.

- **Expire**: snapshots committed more than ``output.version_retention`` ago, by the run's
  data interval end and by the wall clock, whichever is earlier (a late or backfilled run
  expires less, never more; a query that planned on a snapshot in real time keeps it so
  long). The current snapshot is never expired: the amend and rebuild paths read the hour's
  current files, and those are the current snapshot's.
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
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tidemark.errors import TidemarkError
from tidemark.hourcommit.iceberg import IcebergHourCommit
from tidemark.state.maintenance_log import record_step
from tidemark.table import Table

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable
    from pyiceberg.table.snapshots import Snapshot

log = logging.getLogger(__name__)


@dataclass
class MaintenanceResult:
    table: str
    cutoff: str = ""
    expired: list[int] = field(default_factory=list)
    kept: int = 0
    deleted: list[str] = field(default_factory=list)  # metadata files, warehouse-relative
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def maintain(table: Table, interval_end: datetime, *, dry_run: bool = False) -> MaintenanceResult:
    """Expire the table's snapshots past the retention and delete its orphan metadata."""
    commit = table.commit
    if not isinstance(commit, IcebergHourCommit):
        raise TidemarkError(
            f"{table.name}: output.table_format is {table.config.output.table_format}, not iceberg: nothing to maintain"
        )
    retention = table.config.output.version_retention
    cutoff = min(interval_end, datetime.now(UTC)) - retention  # the wall clock bounds readers
    result = MaintenanceResult(table.name, cutoff.isoformat(), dry_run=dry_run)
    iceberg = commit.load()
    if iceberg is None:
        log.info("%s: no Iceberg table yet (no hour sealed): nothing to maintain", table.name)
        return result
    current = iceberg.current_snapshot()
    cutoff_ms = int(cutoff.timestamp() * 1000)
    result.expired = [
        s.snapshot_id for s in iceberg.snapshots() if s.timestamp_ms < cutoff_ms and s != current
    ]
    if result.expired and not dry_run:
        iceberg.maintenance.expire_snapshots().by_ids(result.expired).commit()
        iceberg = commit.load() or iceberg
    kept = [s for s in iceberg.snapshots() if s.snapshot_id not in result.expired]
    result.kept = len(kept)
    result.deleted = _orphan_metadata(commit, iceberg, kept, cutoff)
    if not dry_run:
        for relative in result.deleted:
            commit.store.delete(relative)
        summary = {"snapshots_expired": len(result.expired), "metadata_files_deleted": len(result.deleted)}
        record_step(
            table.state.journal.root, "expire_snapshots", f"as of {interval_end.isoformat()}", summary
        )
    log.info(
        "%s: %s %s snapshots committed before %s (kept %s); %s %s metadata files no kept snapshot references",
        table.name,
        "would expire" if dry_run else "expired",
        len(result.expired),
        result.cutoff,
        result.kept,
        "would delete" if dry_run else "deleted",
        len(result.deleted),
    )
    return result


def _orphan_metadata(
    commit: IcebergHourCommit, iceberg: IcebergTable, kept: list[Snapshot], cutoff: datetime
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
    names = {commit.relative_of(location) for location in referenced}
    base = commit.layout.relative(commit.layout.table_dir / "metadata")
    store = commit.store
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
