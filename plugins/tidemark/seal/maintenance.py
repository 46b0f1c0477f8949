"""A table format's own upkeep (``tidemark_maintain_<table>``, daily; ``tidemark maintain``):
for an Iceberg table, its snapshots expired and the metadata files no kept snapshot needs
deleted (``hourcommit.iceberg_maintenance``, behind the table's publication seam).

- **Cutoff**: ``output.version_retention`` before the run's data interval end or the wall
  clock, whichever is earlier (a late or backfilled run expires less, never more; a query
  that planned on a snapshot in real time keeps it so long).
- **Data files**: each hour's version directories are deleted by the seal's collector once
  nothing the publication keeps references them and the retention has passed: expiring here
  is what lets it.
- **Small files**: none to rewrite: every version of an hour is written compacted to
  ``output.target_file_size`` (the seal, an amend and a rebuild rewrite the whole hour).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from tidemark.hourcommit.publication import MaintenanceResult
from tidemark.state.maintenance_log import record_step
from tidemark.table import Table

log = logging.getLogger(__name__)


def maintain(table: Table, interval_end: datetime, *, dry_run: bool = False) -> MaintenanceResult:
    """The table format's upkeep as of ``interval_end`` (a Hive table has none: refused)."""
    cutoff = min(interval_end, datetime.now(UTC)) - table.config.output.version_retention
    result = table.commit.publication.maintain(cutoff, dry_run=dry_run)
    if not dry_run:
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
