"""Task-side staging: a read task writes its classified records as Parquet files itself.

The records of a batch never cross into the JVM on this path: each task
(``source.stage_ranges``) classifies its sub-range in Arrow and writes, under the batch attempt's
staging directory,

- ``rows/dt=D/hr=H/p<mq partition>-<start>.parquet``: the table's rows of hour D/H,
- ``late/dt=D/hr=H/...``: valid rows of hours sealed before the batch was planned,
- ``dirty/p<mq partition>-<start>.parquet``: dirty records with their reasons,

one file per kind and hour per task, named by the sub-range, so a retried task rewrites the
same names (each file is written aside and renamed into place). The task then returns only
the counts per MQ partition, hour, lateness and reason, which the driver reconciles with the
read receipts and with the row counts in the files' own footers. The publisher (dump.py)
moves these files into the table exactly as it moved Spark's.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.ingest.columns import META_COLUMNS
from tidemark.ingest.counts import StagedCount
from tidemark.ingest.spec import Classified, ClassifySpec
from tidemark.time.hours import hour_path
from tidemark.time.instants import aware

if TYPE_CHECKING:
    import pyarrow as pa

KINDS = ("rows", "late", "dirty")
# (dt, hr, late, reason) -> [count, min event time, max event time]
Counts = dict[tuple[str | None, str | None, bool, str | None], list[Any]]


class TaskStager:
    """Collects one task's classified blocks and writes them as files on ``close``."""

    def __init__(self, staging: Path, spec: ClassifySpec, mq_partition: int, start: int) -> None:
        if spec.partition_columns:
            raise ValueError(
                "task-side staging cannot bound data-derived partition values: that needs the whole "
                "batch (use the classified mode)"
            )
        self.staging = staging
        self.spec = spec
        self.mq_partition = mq_partition
        self.file_name = f"p{mq_partition}-{start:012d}.parquet"
        self.columns = [name for name, _ in spec.columns] + list(META_COLUMNS)
        self.groups: dict[tuple[str, str], list[pa.Table]] = {}  # (kind, hour dir) -> tables
        self.counts: Counts = {}

    def add(self, block: Classified) -> None:
        import pyarrow.compute as pc

        good = block.good
        ts = self.spec.event_time_field
        if good.num_rows:
            summary = good.group_by(["dt", "hr", "_late"]).aggregate(
                [(ts, "count"), (ts, "min"), (ts, "max")]
            )
            for row in summary.to_pylist():
                key = (row["dt"], row["hr"], bool(row["_late"]), None)
                self._count(key, row[f"{ts}_count"], row[f"{ts}_min"], row[f"{ts}_max"])
                kind = "late" if row["_late"] else "rows"
                mask = pc.and_(
                    pc.and_(pc.equal(good["dt"], row["dt"]), pc.equal(good["hr"], row["hr"])),
                    pc.equal(good["_late"], row["_late"]),
                )
                part = good.filter(mask).select(self.columns)
                self.groups.setdefault((kind, hour_path(row["dt"], row["hr"])), []).append(part)
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
        """Write each group's file aside, then rename it into place."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        for (kind, hour_dir), tables in sorted(self.groups.items()):
            directory = self.staging / kind / hour_dir if hour_dir else self.staging / kind
            directory.mkdir(parents=True, exist_ok=True)
            target = directory / self.file_name
            tmp = directory / f".{self.file_name}.{uuid.uuid4().hex}.tmp"  # attempts may overlap
            pq.write_table(pa.concat_tables(tables), tmp)
            os.replace(tmp, target)
        self.groups.clear()

    def stats(self) -> Iterator[StagedCount]:
        """The counts per hour, lateness and reason, with the event-time range of good rows."""
        for (dt, hr, late, reason), (n, low, high) in sorted(
            self.counts.items(), key=lambda kv: tuple("" if v is None else str(v) for v in kv[0])
        ):
            # timestamp_ntz event times are naive: UTC, never the worker's local time
            yield StagedCount(self.mq_partition, dt, hr, late, reason, n, aware(low), aware(high))


def staged_rows(attempt_dir: Path) -> dict[str, int]:
    """Rows per kind in the staged files, from their Parquet footers (no data is read)."""
    import pyarrow.parquet as pq

    return {
        kind: sum(pq.read_metadata(p).num_rows for p in (attempt_dir / kind).rglob("*.parquet"))
        for kind in KINDS
    }
