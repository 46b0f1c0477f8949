"""Rebuilding a sealed hour from the broker, deterministically (backfill of hours).

The commit log knows which batches fed hour H (``rows_per_hour`` and
``late_per_hour`` of each commit) and the offset ranges each read. A rebuild:

1. plans: the feeding batches, their ranges and the rows the commit log counted for H; the
   offsets must still be on the broker, else ``DataLossError`` (nothing is touched);
2. re-reads exactly those ranges and classifies each batch as it was classified then (its
   plan's processing time and sealed frontier, the admitted partition values), keeping the
   rows of H: the on-time rows and, under ``late_policy: amend``, H's late rows (the
   partition holds them too). Under ``side_table`` the late rows stay in ``<table>__late``:
   folding them in would count them twice for readers of both tables. A replay batch
   (``ingest/replay.py``) is re-read from the dirty records it replayed (kept hidden under
   ``<table>__dirty/_replayed``); the records a batch left dirty are never its rows, even if
   today's config would accept them (they are a replay's, or still dirty);
3. reconciles: rows kept == rows the commit log counted, records read == records committed;
4. writes them sorted by (MQ partition, offset) into a staging directory and runs the
   quality gate on it: a failure leaves the published hour untouched;
5. under the table lock: swaps the staging directory with the hour's directory in one step
   (Linux ``renameat2`` exchange; two renames elsewhere), re-registers the partitions and
   journals a ``rebuild`` entry (version + 1), which the announce task emits as an Asset event.

Rebuilding an hour twice gives the same rows. A retry of the same run id after the journal
entry is a no-op; a crash before it is repaired by the retry (the data swapped in is the same).
Two rebuilds of one hour at once: the second fails cleanly on the hour's rebuild lock.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.config.columns import HOUR_COLUMNS, data_fields, table_columns
from tidemark.errors import QualityGateError, RebuildError, ReconciliationError
from tidemark.faults import crash_point
from tidemark.hourcommit.base import Writer
from tidemark.ingest import cardinality
from tidemark.ingest.identity import broker_identity
from tidemark.ingest.kafka import client_properties, partition_offsets
from tidemark.ingest.registry import registry_failures
from tidemark.ingest.replay import classified_again, dirty_frame
from tidemark.ingest.spec import ClassifySpec
from tidemark.seal.hourfiles import HourFiles, step_entry
from tidemark.seal.metastore import quote_identifier
from tidemark.seal.rebuild_plan import RebuildPlan, check_offsets, check_sources, plan_rebuild
from tidemark.settings import Settings
from tidemark.state.journal import EntryKind, JournalEntry, JournalState
from tidemark.state.layout import (
    batch_dir_name,
)
from tidemark.state.locks import Lease
from tidemark.table import Table
from tidemark.tablefs import Store
from tidemark.time.hours import Hour, parse_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass
class RebuildResult:
    table: str
    run_id: str
    hours: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Rebuilder:
    """Rebuilds published hours of one table (I/O: broker, files, Spark, metastore, journal)."""

    def __init__(self, spark: SparkSession, table: Table, run_id: str) -> None:
        self.spark = spark
        self.config = table.config
        self.settings = table.settings
        self.run_id = run_id
        self.files = HourFiles(spark, table, run_id)
        self.layout = table.layout
        self.versions = table.commit.versions
        self.state = table.state
        self.journal = self.state.journal
        self.commit_log = self.state.commit_log

    def run(self, hour_keys: list[str]) -> RebuildResult:
        result = RebuildResult(self.config.table, self.run_id)
        self.files.schema_version(self.run_id)  # an older YAML than the table's refuses here
        for key in hour_keys:
            result.hours.append(self.rebuild_hour(key))
        self.files.fresh.sync(f"rebuild run {self.run_id}")  # the fresh read: the new versions
        return result

    def rebuild_hour(self, hour_key: str) -> dict[str, Any]:
        table = self.config.table
        hour = parse_key(hour_key, self.config.event_time.time_zone)
        with self.state.lock(f"rebuild-{hour.key}").hold(self.run_id) as hour_lease:
            partitions = self.journal.state()
            current = partitions.hours.get(hour.key)
            if current is not None and current.kind is EntryKind.REBUILD and current.run_id == self.run_id:
                log.info(
                    "%s: hour %s already rebuilt by run %s (v%s)",
                    table,
                    hour.key,
                    self.run_id,
                    current.version,
                )
                self._drop_staging(hour)
                return {
                    "hour": hour.key,
                    "status": "already_rebuilt",
                    "version": current.version,
                    "rows": current.rows,
                }
            plan, kafka_conf = self._plan(hour, partitions)
            written_with = current.schema_version if current is not None else 0
            hour_config = self.files.history.config_at(self.config, written_with)
            with registry_failures(table):  # a registry down fails the rebuild, named
                new_dir, files, rows = self._write(
                    hour, plan, current, kafka_conf=kafka_conf, hour_config=hour_config, hour_lease=hour_lease
                )
            quality = self.files.quality_of(hour, new_dir, rows, hour_config)
            if quality.blocks:
                self._drop_staging(hour)
                raise QualityGateError(table, {hour.key: list(quality.failures)})
            if plan.sources:  # what was read is still the planned topic's: else nothing is swapped in
                topic = self.config.source.topic
                check_sources(plan, topic, broker_identity(kafka_conf, topic))
            crash_point("before_swap")
            with self.state.lock().hold(self.run_id) as lease:
                hour_lease.check()  # paused past the hour's lease: another rebuild owns it now
                entry, atomic = self._swap_and_record(
                    lease,
                    hour,
                    plan,
                    new_dir,
                    files=files,
                    rows=rows,
                    quality=quality.to_json(),
                    schema_version=written_with,
                )
            self._drop_staging(hour)  # local disk: now holds the previous version
        log.info(
            "%s: hour %s rebuilt as v%s: %s rows in %s files from batches %s (%s swap)",
            table,
            hour.key,
            entry.version,
            rows,
            len(files),
            [s.batch_id for s in plan.sources],
            "atomic" if atomic else "two-rename",
        )
        return {
            "hour": hour.key,
            "status": "rebuilt",
            "version": entry.version,
            "rows": rows,
            "late": entry.late,
            "batches": [s.batch_id for s in plan.sources],
            "atomic_swap": atomic,
        }

    def _plan(self, hour: Hour, partitions: JournalState) -> tuple[RebuildPlan, dict[str, Any]]:
        """The batches that fed the hour and their ranges, checked to be on the broker still
        (``DataLossError`` otherwise: nothing touched); with the broker client's settings."""

        table, current = self.config.table, partitions.hours.get(hour.key)
        plan = plan_rebuild(self.config, self.settings, hour.key, partitions)
        if not plan.sources and current is not None and current.rows:
            raise RebuildError(
                f"{table} hour {hour.key} holds {current.rows} rows (v{current.version}) but the commit "
                "log names no batch that fed it; refusing to swap in an empty hour (published hour untouched)"
            )
        log.info("%s: rebuilding %s", table, plan.describe())
        kafka_conf = client_properties(self.settings.kafka_bootstrap, self.config.source.kafka_properties)
        if plan.sources:
            topic = self.config.source.topic
            check_offsets(
                plan, topic, partition_offsets(kafka_conf, topic), broker_identity(kafka_conf, topic)
            )
        return plan, kafka_conf

    def _write(
        self,
        hour: Hour,
        plan: RebuildPlan,
        current: JournalEntry | None,
        *,
        kafka_conf: dict[str, Any],
        hour_config: TableConfig,
        hour_lease: Lease,
    ) -> tuple[Path, list[str], int]:
        """The hour's rows re-read and written as its next version where readers do not see
        it yet (a retry reuses a complete one); returns (where, its files, rows)."""
        writer = Writer(self.run_id, hour_lease)
        scratch = self._staging(hour)
        draft = self.versions.draft(
            hour,
            "rebuild",
            version=(current.version if current is not None else 0) + 1,
            through=plan.through_batch,
            writer=writer,
            scratch=scratch,
        )
        if draft.done is not None:
            return draft.directory, draft.done.files, draft.done.rows
        receipts = scratch / "receipts"
        frame = self._rows(hour, plan, receipts, kafka_conf, hour_config) if plan.sources else None
        n_files = self._file_count(hour) if plan.sources else 1  # listed only to write
        written = self.files.write_rebuilt(draft, frame, n_files)
        rows = sum(n for _, n in written)
        if frame is not None:
            self._reconcile(hour, plan, receipts, rows)
        files, home = self.versions.complete(draft, written, writer)
        return home, files, rows

    def _staging(self, hour: Hour) -> Path:
        return self.layout.step_staging("rebuild", hour.key, self.run_id)

    def _drop_staging(self, hour: Hour) -> None:
        """The run's scratch (local: the swapped-out previous version; object store: receipts)."""
        self.layout.store.delete_dir(self.layout.relative(self._staging(hour)))

    def _file_count(self, hour: Hour) -> int:
        """As many files as the hour's current version, by the target file size."""
        store = self.layout.store
        size = sum(store.size(self.layout.relative(p)) for p in self._current_files(hour))
        return self.config.output.files_for(size)

    def _current_files(self, hour: Hour) -> list[Path]:
        """The files readers see for the hour now."""
        return self.files.current_files(hour, self.journal.state().hours.get(hour.key))

    def _rows(
        self,
        hour: Hour,
        plan: RebuildPlan,
        receipts: Path,
        kafka_conf: dict[str, Any],
        hour_config: TableConfig,
    ) -> DataFrame:
        """The hour's rows from every feeding batch, each classified as in its first run (by
        the schema version of its plan: a record valid then is a row now, whatever a column
        added since says), then cast to the hour's schema (added columns null, widened types)."""

        from pyspark.sql import functions as F

        from tidemark.ingest.source import read_ranges

        state = self.commit_log.state()
        frames = []
        # The hour is the directory: its files hold no dt/hr columns, like sealed ones.
        types = dict(data_fields(hour_config))

        def hour_columns(present: list[str]) -> list[Any]:
            return [
                (F.col(quote_identifier(c)) if c in present else F.lit(None)).cast(types[c]).alias(c)
                if c in types
                else F.col(quote_identifier(c))
                for c in table_columns(hour_config)
                if c not in HOUR_COLUMNS
            ]

        for source in plan.sources:
            batch_config = self.files.history.config_at(self.config, source.schema_version)
            spec = ClassifySpec.of_batch(
                batch_config,
                topic=self.config.source.topic,
                batch_id=source.batch_id,
                run_id=source.run_id,
                clock=source.clock,
                sealed_through=source.sealed_through,
            )
            if source.replayed:
                inputs = [f for b in source.replayed for f in self.layout.dirty_files_of(b)]
                classified = classified_again(self.spark, inputs, spec)
            else:
                classified = read_ranges(
                    self.spark,
                    self.config.source.topic,
                    [r.__dict__ for r in source.ranges],
                    kafka_conf=kafka_conf,
                    receipts=Store.of(self.layout.uri(receipts / batch_dir_name(source.batch_id))),
                    spec=spec,
                )
            if batch_config.partitioning.columns:
                classified = cardinality.apply_bound(classified, batch_config, state.partition_values)
            keep = F.col("_reason").isNull() & (F.col("dt") == hour.dt) & (F.col("hr") == hour.hr)
            if not plan.include_late:
                keep = keep & ~F.col("_late")
            rows = classified.where(keep)
            left_dirty = self.layout.dirty_files_of(source.batch_id)
            if left_dirty:  # dirty when the batch ran: not its rows, whatever today's config says
                offsets = dirty_frame(self.spark, left_dirty).select(
                    F.col("mq_partition").alias("_mq_partition"), F.col("mq_offset").alias("_mq_offset")
                )
                rows = rows.join(offsets, ["_mq_partition", "_mq_offset"], "left_anti")
            frames.append(rows.select(*hour_columns(rows.columns)))
        return reduce(lambda a, b: a.unionByName(b), frames)

    def _reconcile(self, hour: Hour, plan: RebuildPlan, receipts: Path, rows: int) -> None:
        from tidemark.ingest.reader import read_receipts

        problems = []
        if rows != plan.expected_rows:
            problems.append(f"{rows} rows re-read != {plan.expected_rows} rows the commit log counted")
        for source in plan.sources:
            read = sum(
                r["read"]
                for r in read_receipts(Store.of(self.layout.uri(receipts)), batch_dir_name(source.batch_id))
            )
            if read != source.records:
                problems.append(
                    f"batch {source.batch_id}: {read} records re-read != {source.records} committed"
                )
        if problems:
            raise ReconciliationError(
                f"{self.config.table} hour {hour.key} not rebuilt (published hour untouched): "
                + "; ".join(problems)
            )

    def _swap_and_record(
        self,
        lease: Lease,
        hour: Hour,
        plan: RebuildPlan,
        new_dir: Path,
        *,
        files: list[str],
        rows: int,
        quality: dict[str, Any],
        schema_version: int,
    ) -> tuple[Any, bool]:
        """Under the table lock: the newest version number, the swap, registration, journal;
        the lease checked before each visible step."""
        partitions = self.journal.state()
        current = partitions.hours[hour.key]
        version = current.version + 1
        atomic = self.files.swap_in(hour, new_dir, rows, version=version, writer=Writer(self.run_id, lease))
        entry = step_entry(
            self.config,
            self.run_id,
            hour,
            self.commit_log.state(),
            partitions,
            kind=EntryKind.REBUILD,
            version=version,
            rows=rows,
            files=files,
            quality=quality,
            late=plan.expected_late,
            folded_through_batch=plan.through_batch,
            schema_version=schema_version,
        )
        lease.check()
        self.journal.append(entry)
        return entry, atomic


def run_rebuild(
    spark: SparkSession, config: TableConfig, settings: Settings, run_id: str, hour_keys: list[str]
) -> RebuildResult:
    """Rebuild each hour of ``hour_keys`` (published hours only); idempotent per run id."""
    return Rebuilder(spark, Table.open(config, settings), run_id).run(hour_keys)
