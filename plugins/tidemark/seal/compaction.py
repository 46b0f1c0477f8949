"""The seal's compaction of an hour's batch files into its sealed files, idempotent across
retries (markers), on the local disk (a hidden directory, then a rename) and on object
stores (a version directory named by its content, written once).

A seal run first compacts every due hour it can together (``prepare``: in pyarrow, each hour
that fits one file, its default checks computed in the same pass; in the driver when they are
small, else in one Spark job;
``hour_tasks``); each hour is then taken in order (``compact``), reusing what ``prepare``
wrote, or compacting it alone with Spark (an hour of several files, a stale marker).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.errors import ReconciliationError, VersionConflictError
from tidemark.faults import crash_point
from tidemark.seal.checks import ArrowChecks, CheckResult
from tidemark.seal.hour_tasks import HourTask, HourWriter, HourWritten, arrow_schema, compact_hours
from tidemark.seal.hourfiles import HourFiles
from tidemark.seal.versions import claim_version, mark_version, version_written, write_version_once
from tidemark.state.commitlog import LogState
from tidemark.state.layout import compaction_marker, sealed_file_prefix
from tidemark.state.locks import Lease
from tidemark.state.storage import read_json, replace_atomically
from tidemark.tablefs import exchange_directories
from tidemark.time.hours import Hour

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SCRATCH_OWNER = "_owner.json"  # the lease token of a seal's scratch directory (local disk)
Compacted = tuple[list[str], int, Path]  # files (warehouse-relative), rows, the hour's directory now


class Compactor:
    """Compacts the due hours of one seal run (I/O: files, Spark)."""

    def __init__(self, spark: SparkSession, files: HourFiles, run_id: str, lease: Lease | None) -> None:
        self.spark = spark
        self.files = files
        self.config = files.config
        self.layout = files.layout
        self.run_id = run_id
        self.lease = lease
        self._prepared: dict[str, Compacted] = {}
        self._defaults: dict[str, list[CheckResult]] = {}

    # -- every due hour that fits one file, together -------------------------------------
    def prepare(self, hours: list[Hour], state: LogState) -> int:
        """Compact the due hours that fit one file and have not been compacted yet, together
        (by pyarrow, in the driver or one Spark job: ``hour_tasks.compact_hours``), with their
        default checks; returns how many."""
        tasks, targets = [], {}
        for hour in hours:
            expected = state.rows_per_hour.get(hour.path, 0)
            task = self._task(hour, state) if expected else None
            if task is not None:
                tasks.append(task)
                targets[hour.key] = (hour, expected)
        if not tasks:
            return 0
        prefix = sealed_file_prefix(1)
        writer = HourWriter(
            store=self.layout.store,
            schema=arrow_schema(self.files.ddl()),
            fmt=self.files.format,
            file_name=f"{prefix}-00000{self.files.format.suffix}",
            partition_by=tuple(self.files.extra_columns),
            checks=ArrowChecks.of(self.config, hours[0]),
        )
        log.info(
            "%s: compacting %s hours together (%s)",
            self.config.table,
            len(tasks),
            ", ".join(t.key for t in tasks),
        )
        written = compact_hours(self.spark, writer, tasks)
        crash_point("mid_compaction")
        for task in tasks:
            hour, expected = targets[task.key]
            if written[task.key].failed is not None:  # that hour's problem: compacted alone in its turn
                log.warning(
                    "%s: hour %s failed in the shared compaction (%s); it is compacted alone when its turn comes",
                    self.config.table,
                    task.key,
                    written[task.key].failed,
                )
                continue
            self._keep(hour, task, written[task.key], expected)
        return len(tasks)

    def _task(self, hour: Hour, state: LogState) -> HourTask | None:
        """The hour as a task of ``prepare``, or None: compacted already (or stale: compacted
        alone), no batch files, or more than one file's worth."""
        store, layout = self.layout.store, self.layout
        if layout.object_store:
            named = layout.relative(layout.hour_version(hour.path, 1, state.last_committed))
            if version_written(store, named):
                return None
            inputs = self.files.batch_files(layout.open_dir / hour.path, through=state.last_committed)
        else:
            target, hidden = layout.table_dir / hour.path, layout.sealing_dir / hour.path
            if read_json(compaction_marker(target)) is not None or read_json(compaction_marker(hidden)):
                return None
            inputs = self._local_batch_files(hour)
        relative = [layout.relative(p) for p in inputs]
        size = sum(store.size(r) for r in relative)
        if not inputs or self.config.output.files_for(size) > 1:
            return None
        if layout.object_store:
            directory = claim_version(store, named, self.lease)
        else:
            for residue in (hidden, target):  # a crashed attempt's; never registered
                shutil.rmtree(residue, ignore_errors=True)
            directory = layout.relative(self._scratch("compacted", hour))
        return HourTask(hour.key, tuple(relative), directory, hour.start, hour.end, size)

    def _keep(self, hour: Hour, task: HourTask, written: HourWritten, expected: int) -> None:
        """Mark what an hour's task wrote as compacted (when it holds the committed rows: one
        that does not is left unmarked and fails its hour's reconciliation), with its checks."""
        files = [path for path, _ in written.files]
        home = self.layout.warehouse / task.directory
        if not self.layout.object_store:  # named at their place, as _compact_into names them
            target = self.layout.table_dir / hour.path
            files = [
                self.layout.relative(target / (self.layout.warehouse / f).relative_to(home)) for f in files
            ]
        if written.rows == expected:
            if self.layout.object_store:
                mark_version(self.layout.store, task.directory, written.files)
            else:
                replace_atomically(compaction_marker(home), {"files": files, "rows": written.rows})
            if written.checks is not None:
                self._defaults[hour.key] = written.checks.results(self.config, hour)
        for problem in written.problems:
            log.info("%s hour %s: default checks left to Spark: %s", self.config.table, hour.key, problem)
        if not self.layout.object_store:
            home = self._enter(home, self.layout.sealing_dir / hour.path, hour)
        self._prepared[hour.key] = (files, written.rows, home)
        self._log_compacted(
            hour, inputs=len(task.inputs), size=task.size, files=len(files), rows=written.rows, home=home
        )

    def defaults(self, hour: Hour) -> list[CheckResult] | None:
        """The hour's default checks if its compaction computed them (else Spark's gate does)."""
        return self._defaults.get(hour.key)

    # -- one hour -------------------------------------------------------------------------
    def compact(self, hour: Hour, state: LogState, expected: int) -> Compacted:
        """The hour's compacted files: those ``prepare`` wrote, a retry's marked ones, or
        written now by Spark."""
        if hour.key in self._prepared:
            return self._prepared[hour.key]
        if self.layout.object_store:
            return self._compact_in_place(hour, state, expected)
        return self._compact_local(hour, self.layout.table_dir / hour.path, expected)

    def _compact_local(self, hour: Hour, target: Path, expected: int) -> Compacted:
        """Rewrite the hour's batch files as few files of about target_file_size.

        A marker records the result, so a retry after registration never rewrites a visible
        hour for nothing. A marker whose count differs from the commit log's is stale: a seal
        failed after compacting and before its journal entry (metastore, quality gate, a kill),
        and batches committed rows for the hour since. The hour is then compacted again from
        its batch files (all still in ``_open``) and swapped in whole, so readers of an hour
        registered by the failed attempt see the old files or the new ones, never a mix.

        Until it passes the quality gate, a compacted hour lives in the hidden ``_sealing``
        directory (readers by path and ``MSCK REPAIR`` never see it; a quarantined hour stays
        there until it is released)."""
        hidden = self.layout.sealing_dir / hour.path
        home = target if read_json(compaction_marker(target)) is not None else hidden
        done = read_json(compaction_marker(home))
        if done is not None and int(done["rows"]) == expected:
            log.info(
                "%s: hour %s already compacted (%s files)", self.config.table, hour.key, len(done["files"])
            )
            return list(done["files"]), int(done["rows"]), home
        if done is None:
            for residue in (hidden, target):  # a crashed attempt's; never registered
                if residue.exists():
                    shutil.rmtree(residue)
            private = self._scratch("compacted", hour)
            files, rows = self._compact_into(hour, private, target)
            return files, rows, self._enter(private, hidden, hour)
        log.warning(
            "%s: hour %s was compacted with %s rows by a seal that failed before its journal entry; "
            "batches committed since hold %s rows for it: compacting again",
            self.config.table,
            hour.key,
            done["rows"],
            expected,
        )
        scratch = self._scratch("recompact", hour)
        new_dir = scratch / "hour"
        files, rows = self._compact_into(hour, new_dir, target)
        if self.lease is not None:
            self.lease.check()  # a seal past its lease never swaps its version in
        exchange_directories(new_dir, home)
        shutil.rmtree(scratch, ignore_errors=True)  # now holds the stale version
        return files, rows, home

    def _compact_in_place(self, hour: Hour, state: LogState, expected: int) -> Compacted:
        """Object stores: compact the hour's committed batch files into a new directory named
        by its content (``Layout.versioned_hour``), written once and never renamed. Its marker
        is written last: a retry reuses a directory with a marker, and rewrites one without
        (a crashed attempt's, never registered). A marker that disagrees with the commit log
        means batch files were lost: not sealed."""
        store = self.layout.store
        named = self.layout.hour_version(hour.path, 1, state.last_committed)

        def compact(directory: str) -> list[tuple[str, int]]:
            inputs = self.files.batch_files(self.layout.open_dir / hour.path, through=state.last_committed)
            if not inputs:
                return []
            home = self.layout.warehouse / directory
            size = sum(store.size(self.layout.relative(p)) for p in inputs)
            frame = self.files.read_hour(home, inputs)
            written = self.files.write_version(
                frame, home, sealed_file_prefix(1), self.config.output.files_for(size)
            )
            crash_point("mid_compaction")
            rows = sum(n for _, n in written)
            self._log_compacted(hour, inputs=len(inputs), size=size, files=len(written), rows=rows, home=home)
            return written

        version = write_version_once(store, self.layout.relative(named), compact, self.lease)
        home = self.layout.warehouse / version.directory
        if version.reused:
            if version.rows != expected:
                raise ReconciliationError(
                    f"{self.config.table} hour {hour.key}: {self.layout.uri(home)} holds {version.rows} rows but "
                    f"batches <= {state.last_committed} committed {expected}; not sealed (docs/operations.md)"
                )
            log.info(
                "%s: hour %s already compacted in %s", self.config.table, hour.key, self.layout.uri(home)
            )
        return version.files, version.rows, home

    def _compact_into(self, hour: Hour, directory: Path, target: Path) -> tuple[list[str], int]:
        """Compact the hour's batch files into ``directory`` (which becomes ``target``) with
        Spark; the files are returned as their paths under ``target``."""
        source = self.layout.open_dir / hour.path
        inputs = self._local_batch_files(hour)
        directory.mkdir(parents=True, exist_ok=True)
        files: list[str] = []
        rows = 0
        if inputs:
            size = sum(p.stat().st_size for p in inputs)
            frame = self.files.read_hour(source)
            staging = self._scratch("seal", hour) / "files"  # Spark's output: it must not exist yet
            from tidemark.sparkfiles import into_files

            self.files.write_staged(into_files(frame, self.config.output.files_for(size)), staging)
            crash_point("mid_compaction")
            moved = self.files.move_staged(staging, directory, sealed_file_prefix(1))
            shutil.rmtree(staging.parent, ignore_errors=True)
            rows = self.files.staged_rows(directory)  # what arrived: its marker never claims more
            files = [
                self.layout.relative(target / (self.layout.warehouse / m).relative_to(directory))
                for m in moved
            ]
            self._log_compacted(hour, inputs=len(inputs), size=size, files=len(files), rows=rows, home=target)
        replace_atomically(compaction_marker(directory), {"files": files, "rows": rows})
        return files, rows

    # -- the local disk's fence ------------------------------------------------------------
    @property
    def _writer(self) -> str:
        """This seal among the writers of an hour: its run and lease token (a retry of the
        same run, or a seal paused past its lease, has another)."""
        return f"{self.run_id}-t{self.lease.token}" if self.lease is not None else self.run_id

    def _scratch(self, step: str, hour: Hour) -> Path:
        """An empty scratch directory of this seal's own for ``step`` of ``hour``, marked with
        its lease token; the scratch of older leases of the hour (crashed attempts, or a seal
        paused past its lease: whatever it still writes, its marker counts only what arrived)
        is removed first."""
        token = self.lease.token if self.lease is not None else -1
        for kind in ("seal", "recompact", "compacted"):
            for old in self.layout.staging_root.glob(f"{kind}-{hour.key}-*"):
                owner = read_json(old / SCRATCH_OWNER) or {}
                if int(owner.get("token", -1)) < token:
                    shutil.rmtree(old, ignore_errors=True)
        scratch = self.layout.step_staging(step, hour.key, self._writer)
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        replace_atomically(scratch / SCRATCH_OWNER, {"token": token, "run_id": self.run_id})
        return scratch

    def _enter(self, private: Path, hidden: Path, hour: Hour) -> Path:
        """Make this seal's complete directory the hour's hidden one: one rename, which a
        directory already there refuses. So a seal paused past its lease never writes into the
        directory its successor compacted (or quarantined) the hour in; object stores get the
        same fence from directories owned by a lease (``versions.claim_version``)."""
        import errno

        hidden.parent.mkdir(parents=True, exist_ok=True)
        try:
            private.rename(hidden)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            shutil.rmtree(private, ignore_errors=True)  # its own: nobody else reads it
            raise VersionConflictError(
                f"{self.config.table} hour {hour.key}: {hidden} was written by another seal meanwhile; "
                f"nothing of run {self.run_id}'s entered it (its lease may have expired): retry"
            ) from None
        (hidden / SCRATCH_OWNER).unlink(missing_ok=True)  # the scratch's mark, not the hour's
        return hidden

    def _local_batch_files(self, hour: Hour) -> list[Path]:
        """The hour's batch files on the local disk (all committed: published on commit)."""
        source = self.layout.open_dir / hour.path
        return sorted(source.rglob("*.parquet")) if source.exists() else []

    def _log_compacted(
        self, hour: Hour, *, inputs: int, size: int, files: int, rows: int, home: Path
    ) -> None:
        log.info(
            "%s: hour %s compacted %s batch files (%s bytes) into %s files, %s rows, for %s",
            self.config.table,
            hour.key,
            inputs,
            size,
            files,
            rows,
            self.layout.uri(home),
        )
