"""The maintenance DAG's compact step for a whole table: the hours' small files
(``seal.recompact``), then, for a CDC table whose snapshot is a Delta or Iceberg table, that
table's current files (``VersionedSnapshot.compact``: Delta's OPTIMIZE, Iceberg's
``rewrite_data_files``) under the snapshot lock every merge holds, so no merge commits
between the plan and the rewrite."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.config import TableConfig
from tidemark.seal.recompact import CompactResult, run_compaction
from tidemark.settings import Settings
from tidemark.snapshot.formats import is_versioned, open_versioned, snapshot_lock
from tidemark.snapshot.snapshots import SnapshotLog
from tidemark.state.maintenance_log import last_steps, record_step
from tidemark.table import Table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run_table_compaction(
    spark: SparkSession, config: TableConfig, settings: Settings, run_id: str, *, dry_run: bool = False
) -> CompactResult:
    """Merge back the small files of ``config.table``'s hours and of its versioned snapshot;
    safe to retry (a rewrite that committed finds nothing due the second time)."""
    result = run_compaction(spark, config, settings, run_id, dry_run=dry_run)
    if config.cdc is None or not is_versioned(config):
        return result
    table = Table.open(config, settings)
    with table.state.lock(snapshot_lock(config, "")).hold(run_id):
        versioned = open_versioned(spark, config, settings)
        versioned.recover(SnapshotLog(settings.state_location, config.table))  # a merge's, first
        result.snapshot = versioned.compact(dry_run=dry_run)
    if not dry_run and result.snapshot:
        root = table.state.journal.root
        step = {k: v for k, v in last_steps(root).get("compact", {}).items() if k not in ("at", "run_id")}
        files = f"{result.snapshot['files_before']} -> {result.snapshot.get('files_after', result.snapshot['files_before'])}"
        record_step(root, "compact", run_id, {**step, "snapshot_files": files})
    return result
