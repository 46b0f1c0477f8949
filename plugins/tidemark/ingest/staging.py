"""Task-side staging: a read task writes its classified records as Parquet files itself.

The records of a batch never cross into the JVM on this path: each task
(``source.stage_ranges``) classifies its sub-range in Arrow and writes, under the batch attempt's
staging directory,

- ``rows/dt=D/hr=H/p<mq partition>-<start>.parquet``: the table's rows of hour D/H,
- ``late/dt=D/hr=H/...``: valid rows of hours sealed before the batch was planned,
- ``dirty/p<mq partition>-<start>.parquet``: dirty records with their reasons,

one file per kind and hour per task, named by the sub-range, so a retried task rewrites the
same names (each file is written aside and renamed into place). On an object store there is
no rename to publish with: the task writes each file once under its final, batch-carrying
name (``StagingTargets``), in places readers do not see before the batch commits. The task
then returns only
the counts per MQ partition, hour, lateness and reason, which the driver reconciles with the
read receipts and with the row counts in the files' own footers. The publisher (dump.py)
moves these files into the table exactly as it moved Spark's.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.config.columns import META_COLUMNS
from tidemark.ingest.counts import StagedCount
from tidemark.ingest.frames import split_classified
from tidemark.ingest.spec import Classified, ClassifySpec
from tidemark.state.layout import attempt_file_name, batch_task_file_name
from tidemark.tableformat import TableFormat
from tidemark.tablefs import Store
from tidemark.task_runtime import task_body
from tidemark.time.hours import hour_path
from tidemark.time.instants import aware

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

KINDS = ("rows", "late", "dirty")
# (dt, hr, late, reason) -> [count, min event time, max event time]
Counts = dict[tuple[str | None, str | None, bool, str | None], list[Any]]


@dataclass(frozen=True)
class StagingTargets:
    """Where a read task writes (picklable: it travels to the executors).

    ``final`` is None for a filesystem with rename: files go under the attempt's staging
    directory and the publisher moves them. On an object store it maps each kind to the
    warehouse-relative directory its files are written to once, under final names."""

    store: Store
    attempt: str  # warehouse-relative: receipts, the manifest (and the staged files)
    batch_id: int
    final: dict[str, str] | None = None
    token: int | None = None  # object stores: the attempt's lease token, in every file name
    rows_format: TableFormat | None = None  # of rows and late rows (``tableformat.batch_format``)

    @classmethod
    def local(cls, attempt_dir: Path) -> StagingTargets:
        """Staging in a plain local directory (tests, tools)."""
        return cls(Store.of(str(attempt_dir)), "", 0)

    @property
    def receipts(self) -> str:
        return f"{self.attempt}/receipts" if self.attempt else "receipts"

    def file(self, kind: str, hour_dir: str, name: str) -> str:
        """The warehouse-relative path of a task's file of ``kind`` (and hour)."""
        if self.final is None:
            return "/".join(part for part in (self.attempt, kind, hour_dir, name) if part)
        name = attempt_file_name(name, self.token)
        if kind == "dirty":
            return f"{self.final[kind]}/{name}"
        return f"{self.final[kind]}/{hour_dir}/{batch_task_file_name(self.batch_id, name)}"


class TaskStager:
    """Collects one task's classified blocks and writes them as files on ``close``."""

    def __init__(self, targets: StagingTargets, spec: ClassifySpec, mq_partition: int, start: int) -> None:
        self.targets = targets
        self.spec = spec
        self.mq_partition = mq_partition
        self.file_name = f"p{mq_partition}-{start:012d}.parquet"
        # data-derived partition columns are in the path (col=value/), as Spark writes them
        self.parts = list(spec.partition_columns)
        self.columns = [name for name, _ in spec.columns if name not in self.parts] + list(META_COLUMNS)
        self.groups: dict[tuple[str, str], list[pa.Table]] = {}  # (kind, hour dir) -> tables
        self.counts: Counts = {}

    def add(self, block: Classified) -> None:
        import pyarrow.compute as pc

        good = block.good
        ts = self.spec.event_time_field
        if good.num_rows:
            keys = ["dt", "hr", "_late", *self.parts]
            summary = good.group_by(keys).aggregate([(ts, "count"), (ts, "min"), (ts, "max")])
            for row in summary.to_pylist():
                key = (row["dt"], row["hr"], bool(row["_late"]), None)
                self._count(key, row[f"{ts}_count"], row[f"{ts}_min"], row[f"{ts}_max"])
                kind = "late" if row["_late"] else "rows"
                mask = pc.equal(good["dt"], row["dt"])
                for name in keys[1:]:
                    mask = pc.and_(mask, pc.equal(good[name], row[name]))
                part = good.filter(mask).select(self.columns)
                directory = "/".join(
                    [hour_path(row["dt"], row["hr"]), *(f"{c}={row[c]}" for c in self.parts)]
                )
                self.groups.setdefault((kind, directory), []).append(part)
        dirty = block.dirty
        if dirty.num_rows:
            for row in dirty.group_by(["reason"]).aggregate([("reason", "count")]).to_pylist():
                self._count((None, None, False, row["reason"]), row["reason_count"], None, None)
            self.groups.setdefault(("dirty", ""), []).append(dirty)

    def _count(
        self, key: tuple[str | None, str | None, bool, str | None], n: int, low: Any, high: Any
    ) -> None:
        entry = self.counts.setdefault(key, [0, None, None])
        entry[0] += n
        if low is not None:
            entry[1] = low if entry[1] is None else min(entry[1], low)
            entry[2] = high if entry[2] is None else max(entry[2], high)

    def close(self) -> None:
        """Write each group's file whole (aside and renamed, or one upload)."""
        import pyarrow as pa

        for (kind, hour_dir), tables in sorted(self.groups.items()):
            target = self.targets.file(kind, hour_dir, self.file_name)
            fmt = None if kind == "dirty" else self.targets.rows_format
            self.targets.store.write_table(target, pa.concat_tables(tables), fmt)
        self.groups.clear()

    def stats(self) -> Iterator[StagedCount]:
        """The counts per hour, lateness and reason, with the event-time range of good rows."""
        for (dt, hr, late, reason), (n, low, high) in sorted(
            self.counts.items(), key=lambda kv: tuple("" if v is None else str(v) for v in kv[0])
        ):
            # timestamp_ntz event times are naive: UTC, never the worker's local time
            yield StagedCount(self.mq_partition, dt, hr, late, reason, n, aware(low), aware(high))


def stage_frame(frame: DataFrame, targets: StagingTargets, spec: ClassifySpec) -> list[StagedCount]:
    """Stage a classified frame (``frames.classified_ddl``: a batch bounded over its whole
    partition values, or a replay) in one pass: each Spark task writes its rows, late rows
    and dirty records as the read tasks do (``TaskStager``, one per MQ partition it holds,
    files named by the task) and returns its counts."""

    task = functools.partial(_stage_task, targets=targets, spec_json=spec.to_json())
    payloads = frame.mapInArrow(task, "counts binary").collect()
    return [count for row in payloads for count in pickle.loads(row["counts"])]


@task_body
def _stage_task(
    batches: Iterator[pa.RecordBatch], *, targets: StagingTargets, spec_json: str
) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark import TaskContext

    spec = ClassifySpec.from_json(spec_json)
    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    stagers: dict[int, TaskStager] = {}
    for batch in batches:
        table = pa.Table.from_batches([batch])
        for mq_partition in pc.unique(table["_mq_partition"]).to_pylist():
            part = table.filter(pc.equal(table["_mq_partition"], mq_partition))
            stager = stagers.setdefault(mq_partition, TaskStager(targets, spec, mq_partition, task))
            stager.add(split_classified(part, spec))
    counts = []
    for stager in stagers.values():
        stager.close()
        counts += list(stager.stats())
    yield pa.RecordBatch.from_pydict({"counts": [pickle.dumps(counts)]})


def staged_rows(store: Store, files: dict[str, list[str]]) -> dict[str, int]:
    """Rows per kind in a batch's files, from their Parquet footers (no data is read)."""
    return {kind: sum(store.rows(f) for f in files.get(kind, ())) for kind in KINDS}
