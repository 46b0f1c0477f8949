"""Several hours compacted together, each by pyarrow: read its batch files, write its sealed
file, and compute its default checks in the same pass; in the driver when they are small
together, else in one Spark job of Python tasks.

Why: an hour sealed on its own paid two Spark jobs (the compaction, then the checks'
aggregation) plus the rows' trip through the JVM both ways; the floor (one pyarrow process
reading, writing and checking an hour) is several times faster. Here an hour's rows never
leave the Python process that reads them, and every due hour of a run is compacted together.
On a ``local`` master whose session has not started (the seal's lazy one: the default), the
hours are compacted in processes forked from the driver, one per core, while the driver pays
its own fixed costs beside them (the seal's warm-ups: pyiceberg's import, the metastore's
connection), with no GIL between the two. With a started session, up to ``IN_DRIVER_BYTES`` of
batch files, or on a ``local`` master at any size (the executors share the driver's machine),
the driver does it in threads (a Spark job would first start its Python workers: ~1.5 s
here); above, on a cluster, one Spark job of as many tasks as there are cores, each taking
its share of the hours in turn (a Python task costs ~0.1 s to start here).

Only hours written as one file take this path (their batch files total at most
``output.target_file_size``: most hours of most tables); a bigger hour is spread over
several files by Spark as before (``Compactor._compact_into``). What an hour's task writes is
what the compaction it replaces wrote: the table's format and columns, extra partition columns
as ``col=value/`` directories, the same instants (INT96 batch files included), stored as
Spark stores them on the local disk and as pyarrow does on object stores.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.arrowfiles import PartitionedFiles, conform, path_values
from tidemark.driver_tasks import local_cores, map_forked
from tidemark.seal.checks import ArrowChecks, ArrowSummary
from tidemark.tableformat import TableFormat, arrow_batches, format_of
from tidemark.tablefs import Store
from tidemark.task_runtime import arrow_without_pandas, jemalloc_in_a_fresh_process, task_body

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HourTask:
    """One hour to compact: its committed batch files and the directory its file goes to
    (both warehouse-relative)."""

    key: str
    inputs: tuple[str, ...]
    directory: str
    start: datetime
    end: datetime
    sizes: tuple[int, ...] = ()  # bytes of each batch file

    @property
    def size(self) -> int:
        """Bytes of the batch files."""
        return sum(self.sizes)


@dataclass(frozen=True)
class HourWritten:
    """What an hour's task wrote: (warehouse-relative file, rows) per file, and its default
    checks (None when the table has none, or pyarrow could not judge its key: then Spark's
    aggregation judges the hour as before)."""

    key: str
    files: list[tuple[str, int]]
    checks: ArrowSummary | None = None
    problems: list[str] = field(default_factory=list)
    failed: str | None = None  # the hour's error: its task failed, the other hours' did not
    adopted: bool = False  # its batch files taken as they are (``seal.adoption``), not rewritten

    @property
    def rows(self) -> int:
        return sum(n for _, n in self.files)


@dataclass(frozen=True)
class HourWriter:
    """How every hour of a table is written (picklable, shipped to the tasks)."""

    store: Store
    schema: pa.Schema  # the table's columns in Arrow types, extra partition columns last
    fmt: TableFormat
    file_name: str  # of each hour's one file (per extra partition value)
    partition_by: tuple[str, ...] = ()
    checks: ArrowChecks | None = None

    def compact(self, task: HourTask) -> HourWritten:
        """Read the hour's batch files under the table's schema, write them as one file (per
        extra partition value), and judge the rows written."""

        names = self.schema.names
        files = PartitionedFiles(
            self.store,
            task.directory,
            self.file_name,
            self.partition_by,
            self.fmt,
        )
        checked: list[pa.RecordBatch] = []
        try:
            for relative in task.inputs:
                values = path_values(relative)
                with self.store.fs.open_input_file(self.store.path(relative)) as handle:
                    for batch in arrow_batches(handle, format_of(relative).suffix, names):
                        rows = conform(batch, self.schema, values, exact=True)
                        files.write(rows)
                        if self.checks is not None:
                            checked.append(rows.select(self.checks.columns))
        finally:
            written = files.close()
        return HourWritten(task.key, written, *self._judge(task, checked))

    def compact_alone(self, task: HourTask) -> HourWritten:
        """:meth:`compact`, an error kept as the hour's own (its files, if any, stay unmarked:
        the seal compacts that hour again in its turn and fails there, naming it), so one
        hour's bad file never stops the other hours of the shared compaction."""
        try:
            return self.compact(task)
        except Exception as exc:  # any: it is reported, never lost (see Compactor.prepare)
            return HourWritten(task.key, [], failed=f"{type(exc).__name__}: {exc}"[:2000])

    def _judge(self, task: HourTask, checked: list[pa.RecordBatch]) -> tuple[ArrowSummary | None, list[str]]:
        import pyarrow as pa

        if self.checks is None or not checked:
            return None, []
        try:
            return self.checks.summarize(pa.Table.from_batches(checked), task.start, task.end), []
        except (
            pa.ArrowNotImplementedError,
            pa.ArrowInvalid,
            pa.ArrowTypeError,
        ) as exc:  # a key type pyarrow cannot group
            return None, [f"{type(exc).__name__}: {exc}"]


# Below this many bytes of batch files in all, the hours are compacted in the driver itself:
# a Spark job would first start Python workers (~1.5 s here, an executor's round trip on a
# cluster), while pyarrow reads and writes 64 MiB in about a second.
IN_DRIVER_BYTES = 64 * 1024 * 1024


def compact_hours(
    spark: SparkSession,
    writer: HourWriter,
    tasks: list[HourTask],
    *,
    pandas_needed: bool = True,
    meanwhile: Callable[[], object] = lambda: None,
) -> dict[str, HourWritten]:
    """Every hour of ``tasks`` compacted: on a ``local`` master whose session has not started,
    in processes forked from the driver (one per core: no GIL between them, nor with the
    driver, which runs ``meanwhile`` beside them: the seal's warm-ups, pyiceberg's import);
    in this process when they are small together (``IN_DRIVER_BYTES``) or a started session's
    executors run on this machine anyway (one thread per core: pyarrow releases the GIL, and
    no Python worker is started); else in one Spark job, the hours spread over as many Spark
    tasks as the application has cores. Wherever it runs, pyarrow runs without its pandas
    import (~0.25 s) unless something else in the job needs pandas (``pandas_needed``: Great
    Expectations). ``meanwhile`` runs once in every case."""
    if not tasks:
        meanwhile()
        return {}
    size = sum(t.size for t in tasks)
    compact = writer.compact_alone if pandas_needed else functools.partial(_compact_task, writer)
    # a lazy session (the seal's) on a local master says its cores without starting; small
    # hours never ask a session anything
    cores = local_cores(spark)
    if cores is not None:
        processes = min(len(tasks), cores)
        log.info(
            "%s hours (%s bytes of batch files) compacted in %s process(es) forked from the driver",
            len(tasks),
            size,
            processes,
        )
        written = map_forked(
            compact, tasks, processes, meanwhile=meanwhile, setup=jemalloc_in_a_fresh_process
        )
        return {w.key: w for w in written}
    meanwhile()
    if size <= IN_DRIVER_BYTES or executors_share_the_driver(spark.sparkContext):
        threads = min(len(tasks), 1 if size <= IN_DRIVER_BYTES else spark.sparkContext.defaultParallelism)
        log.info(
            "%s hours (%s bytes of batch files) compacted in the driver (%s thread(s))",
            len(tasks),
            size,
            threads,
        )
        if threads == 1:
            return {t.key: compact(t) for t in tasks}
        with ThreadPoolExecutor(threads, thread_name_prefix="compact") as pool:
            return {w.key: w for w in pool.map(compact, tasks)}
    context = spark.sparkContext
    slices = min(len(tasks), context.defaultParallelism)
    log.info(
        "%s hours (%s bytes of batch files) compacted by one Spark job of %s tasks", len(tasks), size, slices
    )
    job = functools.partial(_compact_task, writer)
    written = context.parallelize(tasks, slices).map(job).collect()
    return {w.key: w for w in written}


def executors_share_the_driver(context: SparkContext) -> bool:
    """A ``local`` master: its executors are threads of the driver's JVM on the same cores."""
    return str(context.master).startswith("local")


@task_body
def _compact_task(writer: HourWriter, task: HourTask) -> HourWritten:
    return writer.compact_alone(task)


def judge_written(
    store: Store, files: list[str], checks: ArrowChecks, start: datetime, end: datetime
) -> ArrowSummary | None:
    """An hour's default checks over its complete files (a retry reusing the version an earlier
    attempt completed): their check columns alone, read by pyarrow without its pandas import;
    None where a check column is not in the files (an extra partition column) or pyarrow
    cannot judge the key (Spark's gate judges those)."""
    import pyarrow as pa

    with arrow_without_pandas():
        batches: list[pa.RecordBatch] = []
        for relative in files:
            with store.fs.open_input_file(store.path(relative)) as handle:
                batches.extend(arrow_batches(handle, format_of(relative).suffix, checks.columns))
        if not batches or any(c not in batches[0].schema.names for c in checks.columns):
            return None
        try:
            return checks.summarize(pa.Table.from_batches(batches), start, end)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            return None
