"""Operations on the files and registration of one hour, shared by sealing, late-row amends,
releases and rebuilds: reading an hour, moving staged files in under their final names, the
metastore partitions of an hour, the quality gate, publishing (register, then ``_SUCCESS``)
and the journal entry of a step.
"""

from __future__ import annotations

import importlib
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.config.columns import data_fields
from tidemark.faults import crash_point
from tidemark.fresh import FreshGate
from tidemark.hourcommit.base import Draft, HourNote, PublishedHour, Writer, Written
from tidemark.lazy_session import imports_pyspark
from tidemark.schema import arrow_schema_of
from tidemark.seal.checks import CheckResult
from tidemark.seal.metastore import quote_identifier
from tidemark.seal.quality import QualityOutcome, gate, needs_gx, warm_gx
from tidemark.seal.thrift_metastore import open_metastore
from tidemark.state.commitlog import CommittedFiles, LogState
from tidemark.state.journal import EntryKind, JournalEntry, JournalState
from tidemark.state.layout import batch_through, data_docs_dir, write_success
from tidemark.table import Table
from tidemark.tableformat import table_format
from tidemark.task_runtime import task_body
from tidemark.time.hours import Hour

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


class HourFiles:
    """The hours of one table as files and metastore partitions (I/O: files, Spark, metastore)."""

    def __init__(self, spark: SparkSession, table: Table, run_id: str = "") -> None:
        self.spark = spark
        self.table = table
        self.run_id = run_id  # the step's, announced where the table format records it
        self.config = config = table.config
        self.layout = table.layout
        # how a version of an hour becomes visible: its inputs, versions and publication
        self.inputs, self.versions = table.commit.inputs, table.commit.versions
        self.publication, self.late_publication = table.commit.publication, table.commit.late_publication
        self.metastore = open_metastore(spark, config, table.settings)
        self.extra_columns = list(config.partitioning.columns)
        # of the sealed hours (batch files are Parquet), as the table's readers read them
        self.format = table_format(config, int96=self.publication.int96_timestamps)
        self.state = table.state
        self.history = self.state.schema_history
        self.commit_log = self.state.commit_log
        self._commits = CommittedFiles(self.commit_log)  # batch -> its commit record's files
        self.fresh = FreshGate(table)  # when files the fresh read named may be deleted
        # GX Data Docs need a local directory: kept beside the state when it is local
        state = table.settings.state_location
        self.docs_dir = (
            data_docs_dir(state.local_path(), config.table) if state.scheme in ("", "file") else None
        )

    def warm_up(self) -> None:
        """Pay the fixed costs of the first hour while the due hours are compacted (in
        processes forked from the driver, or by Spark): the publication's (pyiceberg's import
        and the table's load, a metastore service's connection, the Hive client's start) and
        Great Expectations' import (~4 s, only for a table with its own expectations: the Data
        Docs pages are rendered later). Each runs in a daemon thread, started after any fork
        (``Compactor.prepare``), without pandas where nothing needs it; a failure there is
        left for the real call to raise, with its own message (imports and the Hive client
        are safe to start from two threads: the second waits for the first)."""
        work = self.publication.warm_ups(self.metastore)
        gx = needs_gx(self.config)
        if gx:
            work.append(warm_gx)
        # pyspark imported here, before the threads, unless no warm-up can import it (a
        # metastore service's Thrift connection): a warm-up may import it (Iceberg's Java
        # catalog, the Hive client, GX) while the main thread does (a table to create, a big
        # hour), and two threads importing pyspark's modules for the first time at once can
        # find one half initialised ("cannot import name 'SQLContext' from partially
        # initialized module 'pyspark.sql'": an hour's shared compaction failed, then ran
        # again through Spark). The compaction in the driver imports no pyspark (arrowfiles).
        if any(imports_pyspark(task) for task in work):
            importlib.import_module("pyspark.sql")
        if not gx:  # without GX nothing of the seal's needs pandas: pyarrow's import of it is spared
            work = [task_body(task) for task in work]
        for task in work:
            threading.Thread(
                target=_quietly, args=(task,), name=f"warm-up-{getattr(task, '__name__', task)}", daemon=True
            ).start()

    def hour_dir(self, hour: Hour) -> Path:
        return self.layout.table_dir / hour.path

    def schema_version(self, run_id: str) -> int:
        """The schema version of the config, ensured once per table handle."""
        return self.table.schema_version(run_id)

    def ddl(self, config: TableConfig | None = None) -> str:
        """The hours' columns as Spark DDL (the config's, or an older version's), extra
        partition columns last, as strings."""
        fields = [*data_fields(config or self.config), *((c, "string") for c in self.extra_columns)]
        return ", ".join(f"{quote_identifier(n)} {t}" for n, t in fields)

    def arrow_schema(self) -> pa.Schema:
        """:meth:`ddl` as the Arrow schema of the hours' files, without a JVM."""
        return arrow_schema_of([*data_fields(self.config), *((c, "string") for c in self.extra_columns)])

    def read_hour(
        self, hour_dir: Path, files: list[Path] | None = None, config: TableConfig | None = None
    ) -> DataFrame:
        """The rows under an hour directory (or of some of its ``files``), extra partition
        columns read back from the path, under the config's schema (or an older version's):
        files of an older version read a new column as null and a widened one promoted (the
        compaction of an hour whose batches span a schema change)."""
        from tidemark.sparkfiles import read_table_files

        return read_table_files(self.spark, self.layout.store, hour_dir, files, self.ddl(config))

    def write_staged(self, frame: DataFrame, staging: Path) -> None:
        """An hour's rows written by Spark's own writer into ``staging`` (a new directory) in
        the table's format, the extra partition columns as subdirectories (a store with rename
        then moves the files in: ``RenamingVersions.write``)."""
        self.format.spark_write(frame.write.partitionBy(*self.extra_columns), str(staging))

    def write_version(
        self, frame: DataFrame, home: Path, prefix: str, n_files: int, *, sort_by: tuple[str, ...] = ()
    ) -> list[tuple[str, int]]:
        """An hour's rows written once into a version's directory by Spark's tasks
        (``sparkfiles.write_files``), the extra partition columns as ``col=value/``
        subdirectories; (warehouse-relative file, rows) per file."""
        from tidemark.sparkfiles import write_files

        return write_files(
            frame,
            self.layout.store,
            self.layout.relative(home),
            prefix,
            n_files,
            sort_by=sort_by,
            partition_by=self.extra_columns,
            fmt=self.format,
        )

    def write_rebuilt(self, draft: Draft, frame: DataFrame | None, n_files: int) -> Written:
        """A rebuilt hour's rows (None: no batch fed it) written into its draft, sorted by
        (MQ partition, offset) within each file, as a rebuild from the topic orders them."""
        if frame is None:
            return []
        written = self.versions.write(
            draft, frame, n_files, files=self, sort_by=("_mq_partition", "_mq_offset")
        )
        crash_point("mid_rebuild")
        return written

    def batch_files(self, directory: Path, *, through: int, after: int = -1) -> list[Path]:
        """Committed batch files under a warehouse directory of batches ``after`` < b <= ``through``
        (not yet folded in), sorted."""
        return self.inputs.batch_files(directory, through=through, after=after, committed=self._commits)

    def current_files(self, hour: Hour, entry: JournalEntry | None) -> list[Path]:
        """The files readers see for the hour now (its journal entry's version)."""
        return self._files_of(PublishedHour.of(hour, entry)) if entry is not None else []

    def read_published(self, hours: list[PublishedHour]) -> DataFrame:
        """The rows of the hours as published now (their current versions)."""
        return self.read_hour(self.layout.table_dir, [f for h in hours for f in self._files_of(h)])

    def _files_of(self, version: PublishedHour) -> list[Path]:
        """The data files of a version of an hour, where the store keeps it."""
        where = self.layout.relative(self.versions.where(version))
        return [self.layout.warehouse / f for f in self.layout.store.files(where)]

    def partition_specs(self, hour: Hour, target: Path) -> list[tuple[dict[str, str], Path]]:
        """(spec, location) of the metastore partitions of an hour: one per extra-column value."""
        if not self.extra_columns:
            return [(hour.spec, target)]
        depth, base = len(self.extra_columns), self.layout.relative(target)
        below = {f[len(base) + 1 :].rsplit("/", 1)[0] for f in self.layout.store.files(base)}
        leaves = sorted(target / b for b in below if b.count("/") == depth - 1)
        specs = []
        for leaf in leaves:
            values = dict(part.split("=", 1) for part in leaf.relative_to(target).parts)
            specs.append(({**hour.spec, **{c: values[c] for c in self.extra_columns}}, leaf))
        return specs

    def quality_of(
        self,
        hour: Hour,
        target: Path,
        rows: int,
        config: TableConfig | None = None,
        *,
        defaults: list[CheckResult] | None = None,
    ) -> QualityOutcome:
        """The quality gate of an hour, under the schema it was written with (``config``);
        ``defaults``: its default checks, when its compaction computed them (no Spark job for
        them, and none at all for a table without its own expectations)."""
        config = config or self.config
        if not rows:
            return gate(config, hour, None, self.docs_dir)
        if defaults is not None and not config.quality.expectations:
            return gate(config, hour, None, self.docs_dir, defaults=defaults)
        return gate(config, hour, self.read_hour(target, config=config), self.docs_dir, defaults=defaults)

    def register(self, hour: Hour, target: Path, *, late: bool = False) -> None:
        """Make the hour's version at ``target`` the one readers see (the table created if
        missing): the table's publication, or with ``late`` its late side table's."""
        publication = self.late_publication if late else self.publication
        note = self.note(hour, target) if publication.records_notes else None
        publication.publish(self.metastore, hour, self.partition_specs(hour, target), note)

    def refresh(self) -> None:
        """Drop the job's cached listing of the table, whose published files changed."""
        self.publication.refresh(self.metastore)

    def note(self, hour: Hour, target: Path) -> HourNote:
        """What the version in ``target`` holds: the hour's batches through the one it is
        named by, with their offsets, and the ready time (a snapshot summary records it)."""
        state = self.commit_log.state()
        through = batch_through(target.name, state.last_committed)
        batches: dict[int, dict[int, list[int]]] = {}
        for batch in state.batches_of_hour(hour.path) or ():
            commit = self.commit_log.commit(batch) if batch <= through else None
            if commit is not None:
                batches[batch] = {r.mq_partition: [r.start, r.end] for r in commit.ranges}
        ready = state.ready
        return HourNote(
            self.run_id, batches, ready.time if ready else None, ready.processing_time if ready else ""
        )

    def swap_in(self, hour: Hour, home: Path, rows: int, *, version: int, writer: Writer) -> bool:
        """A rebuilt version at ``home`` made the hour's (``HourVersions.reveal``: checked,
        moved in where it moves), then published; returns whether the version it replaced was
        exchanged atomically."""
        target, atomic = self.versions.reveal(hour, home, version=version, writer=writer)
        writer.check()
        self.register(hour, target)
        crash_point("after_swap")
        self.refresh()  # a registered hour's files changed: drop the session's cached listing
        self.mark_complete(target, hour, rows, version)
        return atomic

    def publish(self, hour: Hour, target: Path, rows: int, *, version: int, refresh: bool = False) -> None:
        """Register the hour's partitions, then mark the directory complete for path readers."""
        self.register(hour, target)
        if refresh:  # a registered hour's files changed: drop the session's cached listing
            self.refresh()
        crash_point("after_registration")
        self.mark_complete(target, hour, rows, version)
        crash_point("after_success")

    def mark_complete(self, target: Path, hour: Hour, rows: int, version: int) -> None:
        """``_SUCCESS`` in an hour's directory (or its version's, on an object store)."""
        write_success(self.layout.store, self.layout.relative(target), hour.key, rows, version)


def _quietly(task: Any) -> None:
    try:
        task()
    except Exception:  # the real call raises it, named
        log.debug("warm-up %s failed", task, exc_info=True)


def step_entry(
    config: TableConfig,
    run_id: str,
    hour: Hour,
    state: LogState,
    journal: JournalState,
    *,
    kind: EntryKind,
    version: int,
    rows: int,
    files: list[str] | tuple[str, ...],
    quality: dict[str, Any],
    late: int = 0,
    folded_through_batch: int | None = None,
    seq: int | None = None,
    schema_version: int = 0,
) -> JournalEntry:
    """The journal entry of one step of an hour (seal, quarantine, release, amend, rebuild)."""
    return JournalEntry(
        seq=journal.last_seq + 1 if seq is None else seq,
        table=config.table,
        hour=hour.key,
        hour_start=hour.start.isoformat(),
        hour_end=hour.end.isoformat(),
        kind=kind,
        version=version,
        rows=rows,
        late=late,
        files=tuple(files),
        sealed_at=datetime.now(UTC).isoformat(),  # audit only: freshness in reports
        run_id=run_id,
        ready_time=state.ready.time if state.ready else None,
        processing_time=state.ready.processing_time if state.ready else "",
        folded_through_batch=state.last_committed if folded_through_batch is None else folded_through_batch,
        quality=quality,
        schema_version=schema_version,
    )
