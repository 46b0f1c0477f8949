"""The seal's compaction of an hour's batch files into its sealed files, idempotent across
retries (markers); where it writes and how a retry knows it is done is the table's
``HourCommit`` (a hidden directory renamed in, or a version directory written once).

A seal run first compacts every due hour it can together (``prepare``: in pyarrow, each hour
that fits one file, its default checks computed in the same pass; in the driver when they are
small, else in one Spark job;
``hour_tasks``); each hour is then taken in order (``compact``), reusing what ``prepare``
wrote, or compacting it alone with Spark (an hour of several files, a stale marker).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.errors import ReconciliationError
from tidemark.faults import crash_point
from tidemark.hourcommit.base import Compacted, Draft, Writer, Written
from tidemark.seal.adoption import adopt, adoptable_rows
from tidemark.seal.checks import ArrowChecks, CheckResult
from tidemark.seal.hour_tasks import HourTask, HourWriter, HourWritten, compact_hours, judge_written
from tidemark.seal.hourfiles import HourFiles
from tidemark.seal.quality import needs_gx
from tidemark.state.commitlog import LogState
from tidemark.state.layout import sealed_file_prefix
from tidemark.time.hours import Hour

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class Compactor:
    """Compacts the due hours of one seal run (I/O: files, Spark)."""

    def __init__(self, spark: SparkSession, files: HourFiles, writer: Writer) -> None:
        self.spark = spark
        self.files = files
        self.config = files.config
        self.layout = files.layout
        self.versions = files.versions
        self.writer = writer  # the seal's run and lease: it owns the directories it writes
        self._prepared: dict[str, Compacted] = {}
        self._drafts: dict[str, Draft] = {}  # prepare's claimed drafts, by hour
        self._defaults: dict[str, list[CheckResult]] = {}

    # -- every due hour that fits one file, together -------------------------------------
    def prepare(
        self, hours: list[Hour], state: LogState, meanwhile: Callable[[], object] = lambda: None
    ) -> int:
        """Take the due hours not compacted yet: as they are where their batch files are
        already what the seal would write (``adoption``), else those that fit one file
        together (by pyarrow, in the driver or one Spark job: ``hour_tasks.compact_hours``),
        with their default checks; returns how many. ``meanwhile`` (the seal's warm-ups) runs
        once, beside the compaction where it runs in forked processes."""
        tasks, adopted, targets = [], [], {}
        for hour in hours:
            expected = state.rows_per_hour.get(hour.path, 0)
            task = self._task(hour, state) if expected else None
            if task is None:
                continue
            targets[task.key] = (hour, expected)
            rows = self._adoptable(task)
            if rows is not None:
                adopted.append((task, rows))
            elif self.config.output.files_for(task.size) <= 1:
                tasks.append(task)
            else:  # several files' worth: compacted alone, by Spark, in its turn
                del self._drafts[task.key]
        written: dict[str, HourWritten] = {}

        def alongside() -> None:  # while the forked compaction runs, if it does
            meanwhile()
            written.update((task.key, self._adopt(task, rows)) for task, rows in adopted)

        if not tasks:
            alongside()
            if not adopted:
                return 0
        else:
            log.info(
                "%s: compacting %s hours together (%s)",
                self.config.table,
                len(tasks),
                ", ".join(t.key for t in tasks),
            )
            written.update(
                compact_hours(
                    self.spark,
                    self._writer(hours[0]),
                    tasks,
                    pandas_needed=needs_gx(self.config),
                    meanwhile=alongside,
                )
            )
        crash_point("mid_compaction")
        for task in [*(t for t, _ in adopted), *tasks]:
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
        return len(tasks) + len(adopted)

    def _writer(self, hour: Hour) -> HourWriter:
        return HourWriter(
            store=self.layout.store,
            schema=self.files.arrow_schema(),
            fmt=self.files.format,
            file_name=f"{sealed_file_prefix(1)}-00000{self.files.format.suffix}",
            partition_by=tuple(self.files.extra_columns),
            checks=ArrowChecks.of(self.config, hour),
        )

    def _adoptable(self, task: HourTask) -> list[int] | None:
        """The rows of each batch file of an hour that can be adopted as it is, else None."""
        if self.files.extra_columns:
            return None
        return adoptable_rows(
            self.layout.store,
            list(task.inputs),
            list(task.sizes),
            schema=self.files.arrow_schema(),
            fmt=self.files.format,
            target_size=self.config.output.target_file_size,
        )

    def _adopt(self, task: HourTask, rows: list[int]) -> HourWritten:
        """The hour's batch files taken into its version as they are, its default checks
        judged over their check columns."""
        draft = self._drafts[task.key]
        files = adopt(
            self.layout.store,
            list(zip(task.inputs, rows, strict=True)),
            self.layout.relative(draft.directory),
            prefix=draft.prefix,
            suffix=self.files.format.suffix,
        )
        log.info(
            "%s: hour %s adopts its %s batch files (%s bytes) as they are: already the table's format, near %s bytes each",
            self.config.table,
            task.key,
            len(files),
            task.size,
            self.config.output.target_file_size,
        )
        checks = ArrowChecks.of(self.config, draft.hour)
        summary = None
        if checks is not None:
            summary = judge_written(self.layout.store, [f for f, _ in files], checks, task.start, task.end)
        return HourWritten(task.key, files, summary, adopted=True)

    def _task(self, hour: Hour, state: LogState) -> HourTask | None:
        """The hour as a task of ``prepare``, or None: compacted already (or stale: compacted
        alone), or no batch files."""
        store, layout, through = self.layout.store, self.layout, state.last_committed
        draft = self._draft(hour, state)
        if draft.done is not None or draft.replaces is not None:
            return None
        inputs = self._inputs(hour, through)
        if not inputs:
            return None
        relative = [layout.relative(p) for p in inputs]
        sizes = tuple(store.size(r) for r in relative)
        self._drafts[hour.key] = draft
        return HourTask(
            hour.key,
            tuple(relative),
            layout.relative(draft.directory),
            hour.start,
            hour.end,
            sizes,
        )

    def _draft(self, hour: Hour, state: LogState) -> Draft:
        return self.versions.draft(
            hour,
            "compact",
            version=1,
            through=state.last_committed,
            writer=self.writer,
            rows=state.rows_per_hour.get(hour.path, 0),
        )

    def _inputs(self, hour: Hour, through: int) -> list[Path]:
        """The hour's committed batch files, which its compaction reads."""
        return self.files.batch_files(self.layout.open_dir / hour.path, through=through)

    def _keep(self, hour: Hour, task: HourTask, written: HourWritten, expected: int) -> None:
        """Complete what an hour's task wrote (when it holds the committed rows: one that does
        not is left incomplete and fails its hour's reconciliation), with its checks."""
        draft = self._drafts.pop(hour.key)
        if written.rows == expected:
            files, home = self.versions.complete(draft, written.files, self.writer)
            if written.checks is not None:
                self._defaults[hour.key] = written.checks.results(self.config, hour)
        else:
            files, home = [path for path, _ in written.files], draft.directory
        for problem in written.problems:
            log.info("%s hour %s: default checks left to Spark: %s", self.config.table, hour.key, problem)
        self._prepared[hour.key] = (files, written.rows, home)
        self._log_compacted(
            hour,
            inputs=len(task.inputs),
            size=task.size,
            files=len(files),
            rows=written.rows,
            home=home,
            verb="adopted" if written.adopted else "compacted",
        )

    def _judge_reused(self, hour: Hour, files: list[str]) -> None:
        """The default checks of a version an earlier attempt completed, by pyarrow over its
        files, where nothing else reads the hour (no expectations of the table's own): a retry
        then needs no Spark either."""
        checks = ArrowChecks.of(self.config, hour)
        if checks is None or self.config.quality.expectations or hour.key in self._defaults:
            return
        summary = judge_written(self.layout.store, files, checks, hour.start, hour.end)
        if summary is not None:
            self._defaults[hour.key] = summary.results(self.config, hour)

    def defaults(self, hour: Hour) -> list[CheckResult] | None:
        """The hour's default checks if its compaction computed them (else Spark's gate does)."""
        return self._defaults.get(hour.key)

    # -- one hour -------------------------------------------------------------------------
    def compact(self, hour: Hour, state: LogState, expected: int) -> Compacted:
        """The hour's compacted files: those ``prepare`` wrote, a retry's complete ones, or
        written now by Spark as few files of about ``output.target_file_size``. A complete
        version with other rows than the commit log's means batch files were lost where a
        version is written once (not sealed); where one is exchanged in place, the stale
        version is compacted again (``HourVersions.draft``)."""
        if hour.key in self._prepared:
            return self._prepared[hour.key]
        draft = self._draft(hour, state)
        if draft.done is not None:
            if draft.done.rows != expected:
                raise ReconciliationError(
                    f"{self.config.table} hour {hour.key}: {self.layout.uri(draft.directory)} holds "
                    f"{draft.done.rows} rows but batches <= {state.last_committed} committed {expected}; "
                    "not sealed (docs/operations.md)"
                )
            log.info(
                "%s: hour %s already compacted (%s files)", self.config.table, hour.key, len(draft.done.files)
            )
            self._judge_reused(hour, draft.done.files)
            return draft.done.files, draft.done.rows, draft.directory
        inputs = self._inputs(hour, state.last_committed)
        written: Written = []
        if inputs:
            size = sum(self.layout.store.size(self.layout.relative(p)) for p in inputs)
            frame = self.files.read_hour(self.layout.open_dir / hour.path, inputs)
            n_files = self.config.output.files_for(size)
            written = self.versions.write(draft, frame, n_files, files=self.files)
            crash_point("mid_compaction")
            rows = sum(n for _, n in written)
            self._log_compacted(
                hour, inputs=len(inputs), size=size, files=len(written), rows=rows, home=draft.named_under
            )
        files, home = self.versions.complete(draft, written, self.writer)
        return files, sum(n for _, n in written), home

    def _log_compacted(
        self,
        hour: Hour,
        *,
        inputs: int,
        size: int,
        files: int,
        rows: int,
        home: Path,
        verb: str = "compacted",
    ) -> None:
        log.info(
            "%s: hour %s %s %s batch files (%s bytes) into %s files, %s rows, for %s",
            self.config.table,
            hour.key,
            verb,
            inputs,
            size,
            files,
            rows,
            self.layout.uri(home),
        )
