"""Re-compaction: an hour that late amendments left in many small files is written again as
one new version, through the steps a rebuild takes (the store's ``draft``, ``complete`` and
``reveal``, then ``HourFiles.swap_in``): written where readers do not look, its rows counted against the
journal's, swapped in with one exchange or one metastore switch, then journaled as a
``compact`` entry (version + 1, the same rows, late count and fold). Readers see the old
version or the new one, never a mix.

An hour is due (``due_hours``) when it is in more files than its bytes need
(``output.target_file_size``) and either in more than ``compaction.max_files_per_hour`` or
in files smaller on average than ``compaction.min_file_fraction`` of the target. The whole
step runs under the table's lock, so no seal amends the hour between the read and the swap.
A kill at any point is repaired by running it again (the same run id or another).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.config.columns import HOUR_COLUMNS, table_columns
from tidemark.errors import ReconciliationError
from tidemark.hourcommit.base import PublishedHour, Writer
from tidemark.seal.hourfiles import HourFiles, step_entry
from tidemark.seal.late import LateRows
from tidemark.seal.metastore import quote_identifier
from tidemark.state.journal import EntryKind, JournalEntry
from tidemark.state.maintenance_log import record_shape, record_step
from tidemark.table import Table
from tidemark.time.hours import Hour, parse_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tidemark.settings import Settings
    from tidemark.state.locks import Lease

log = logging.getLogger(__name__)


@dataclass
class CompactResult:
    table: str
    run_id: str
    compacted: list[dict[str, Any]] = field(default_factory=list)  # hour, version, files before/after
    considered: int = 0  # hours with more than one file
    versions_deleted: list[str] = field(default_factory=list)  # replaced versions past the grace
    snapshot: dict[str, Any] = field(default_factory=dict)  # a Delta/Iceberg snapshot's (snapshot.compaction)
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def due_hours(
    config: TableConfig, hours: list[JournalEntry], sizes: Callable[[JournalEntry], list[int]]
) -> list[str]:
    """The published hours whose files should be merged back (see the module doc), in order."""
    target = int(config.output.target_file_size)
    return [
        entry.hour
        for entry in sorted(hours, key=lambda e: e.hour_start)
        if entry.published and len(entry.files) > 1 and config.compaction.due(sizes(entry), target)
    ]


def run_compaction(
    spark: SparkSession, config: TableConfig, settings: Settings, run_id: str, *, dry_run: bool = False
) -> CompactResult:
    """Merge back the files of every due hour of ``config.table``; safe to retry."""
    table = Table.open(config, settings)
    with table.state.lock().hold(run_id) as lease:
        return Recompactor(spark, table, run_id, lease).run(dry_run=dry_run)


class Recompactor:
    """Writes due hours again as one version each (I/O: files, Spark, metastore, journal)."""

    def __init__(self, spark: SparkSession, table: Table, run_id: str, lease: Lease | None = None) -> None:
        self.spark = spark
        self.table = table
        self.config = table.config
        self.run_id = run_id
        self.writer = Writer(run_id, lease)
        self.files = HourFiles(spark, table, run_id)
        self.versions = table.commit.versions
        self.journal = table.state.journal

    def run(self, *, dry_run: bool = False) -> CompactResult:
        result = CompactResult(self.config.table, self.run_id, dry_run=dry_run)
        hours = [e for e in self.journal.state().hours.values() if e.published]
        # the table's files listed once (on S3 a request per thousand, not one per file)
        layout = self.table.layout
        listed = layout.store.file_sizes(layout.relative(layout.table_dir))
        sizes = {e.hour: [listed.get(f, 0) for f in e.files] for e in hours}
        if not dry_run:  # the table's shape for the health page: bytes per sealed hour
            record_shape(self.journal.root, {key: sum(found) for key, found in sorted(sizes.items())})
        result.considered = sum(1 for e in hours if len(e.files) > 1)
        due = due_hours(self.config, hours, lambda e: sizes[e.hour])
        log.info(
            "%s: %s of %s hours in more than one file are due for compaction%s: %s",
            self.config.table,
            len(due),
            result.considered,
            " (dry run)" if dry_run else "",
            ", ".join(due) or "none",
        )
        if dry_run:
            return result
        for key in due:
            hour = parse_key(key, self.config.event_time.time_zone)
            result.compacted.append(self.compact_hour(hour, bytes_before=sum(sizes[key])))
        self.files.fresh.sync(f"compaction run {self.run_id}")  # the fresh read: the merged hours
        # the orphan clean-up: versions nothing points at any more, past the grace (what each
        # seal does too, here for a table whose seals have stopped)
        state = self.table.state.commit_log.state()
        late = LateRows(self.files, self.writer)
        result.versions_deleted = late.collect_versions(state, self.journal.state(), self.journal)
        summary = {
            "hours_compacted": len(result.compacted),
            "files_before": sum(c["files_before"] for c in result.compacted),
            "files_after": sum(c["files"] for c in result.compacted),
            "versions_deleted": len(result.versions_deleted),
        }
        record_step(self.journal.root, "compact", self.run_id, summary)
        return result

    def compact_hour(self, hour: Hour, *, bytes_before: int) -> dict[str, Any]:
        current = self.journal.state().hours[hour.key]
        scratch = self.table.layout.step_staging("compact", hour.key, self.run_id)
        draft = self.versions.draft(
            hour,
            "rebuild",
            version=current.version + 1,
            through=current.folded_through_batch,
            writer=self.writer,
            scratch=scratch,
        )
        if draft.done is not None:
            new_dir, files, rows = draft.directory, draft.done.files, draft.done.rows
        else:
            n_files = self.config.output.files_for(bytes_before)
            written = self.files.write_rebuilt(draft, self._rows(hour, current), n_files)
            rows = sum(n for _, n in written)
            self._reconcile(hour, current, rows)
            files, new_dir = self.versions.complete(draft, written, self.writer)
        self.writer.check()
        self.files.swap_in(hour, new_dir, rows, version=current.version + 1, writer=self.writer)
        entry = step_entry(
            self.config,
            self.run_id,
            hour,
            self.table.state.commit_log.state(),
            self.journal.state(),
            kind=EntryKind.COMPACT,
            version=current.version + 1,
            rows=rows,
            files=files,
            quality=current.quality,
            late=current.late,
            folded_through_batch=current.folded_through_batch,
            schema_version=current.schema_version,
        )
        self.writer.check()
        self.journal.append(entry)
        self.table.layout.store.delete_dir(self.table.layout.relative(scratch))  # local: the old version
        log.info(
            "%s: hour %s compacted as v%s: %s rows, %s files (%s bytes) -> %s files",
            self.config.table,
            hour.key,
            entry.version,
            rows,
            len(current.files),
            bytes_before,
            len(files),
        )
        return {
            "hour": hour.key,
            "version": entry.version,
            "files_before": len(current.files),
            "files": len(files),
        }

    def _rows(self, hour: Hour, current: JournalEntry) -> DataFrame:
        """The hour's rows as readers see them now, in the table's columns (the hour is the
        directory: no dt/hr columns; the data-derived partition columns stay)."""
        from pyspark.sql import functions as F

        frame = self.files.read_published([PublishedHour.of(hour, current)])
        columns = [c for c in table_columns(self.config) if c not in HOUR_COLUMNS]
        return frame.select(*(F.col(quote_identifier(c)) for c in columns))

    def _reconcile(self, hour: Hour, current: JournalEntry, written: int) -> None:
        if written != current.rows:
            raise ReconciliationError(
                f"{self.config.table} hour {hour.key} v{current.version}: compaction wrote {written} rows, "
                f"the journal says {current.rows}; the published hour is untouched"
            )
