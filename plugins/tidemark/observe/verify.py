"""``tidemark verify --table T``: the lake checked against the commit log, as readers see it.

The table is read the way its readers read it (the metastore's partitions of a Hive table, the
current snapshot of an Iceberg table), and checked:

- ``offsets``: per MQ partition, the committed ranges follow each other without a hole or an
  overlap; a hole is only a recorded gap (retention, a skip), and offsets start over only
  at a rebase (the topic created again, or another topic bound);
- ``files_referenced_once``: no data file is read through two partitions (or listed twice in
  the snapshot);
- ``hour_rows``: each published hour's files hold the rows its journal entry says, and those
  are the rows the commit log committed for it (plus the late rows folded in); every hour
  with rows is registered and no registered hour is unpublished or dropped by retention;
- ``orphans``: no data file under the table sits outside a registered version, a committed
  batch's open files or a quarantined hour, once older than ``output.version_retention``
  (younger ones may be a step in flight, or a replaced version a reader still reads); the files
  of an hour retention dropped are gone once ``output.version_retention`` has passed.

Each check says PASS or FAIL with its problems; the job exits non-zero on any failure. The
maintenance DAG runs it daily.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.errors import LakeCheckError
from tidemark.seal.thrift_metastore import open_metastore
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import EntryKind
from tidemark.state.layout import batch_of_file
from tidemark.state.maintenance_log import record_step
from tidemark.table import Table
from tidemark.time.hours import parse_key, parse_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.config import TableConfig
    from tidemark.settings import Settings

log = logging.getLogger(__name__)
_HOUR = re.compile(r"(dt=[^/]+/hr=[^/]+)")
DATA_SUFFIXES = (".parquet", ".orc")


@dataclass
class Check:
    name: str
    problems: list[str] = field(default_factory=list)
    checked: int = 0  # how many things it looked at (ranges, files, hours)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class Verdict:
    table: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "ok": self.ok,
            "checks": [{**asdict(c), "ok": c.ok} for c in self.checks],
        }

    def render(self) -> str:
        lines = [f"{self.table}: {'every check passed' if self.ok else 'VIOLATIONS FOUND'}"]
        for check in self.checks:
            lines.append(f"  {'PASS' if check.ok else 'FAIL'} {check.name} ({check.checked} checked)")
            lines += [f"    - {p}" for p in check.problems[:50]]
            if len(check.problems) > 50:
                lines.append(f"    ... and {len(check.problems) - 50} more")
        return "\n".join(lines)


def run_verify(
    spark: SparkSession | None, config: TableConfig, settings: Settings, as_of: datetime
) -> Verdict:
    """Verify the table (the metastore read through ``spark``'s Hive client or the service's
    Thrift API; an Iceberg table needs no session); ``LakeCheckError`` on any violation."""
    table = Table.open(config, settings)
    registered = None
    if table.commit.publication.in_metastore:  # else the format's own snapshot lists the files
        if spark is None:
            raise ValueError("a Spark session is required to read a Hive table's partitions")
        metastore = open_metastore(spark, config, settings)
        metastore.connect()
        registered = (
            metastore.partition_locations(config.table) if spark.catalog.tableExists(config.table) else []
        )
    verdict = verify_table(table, registered, as_of)
    log.info("%s", verdict.render())
    failed = [c for c in verdict.checks if not c.ok]
    summary = {"verdict": "FAIL" if failed else "PASS", "problems": sum(len(c.problems) for c in failed)}
    record_step(table.state.journal.root, "verify", f"as of {as_of.isoformat()}", summary)
    if not verdict.ok:
        raise LakeCheckError(verdict.render())
    return verdict


def check_offsets(commit_log: CommitLog) -> Check:
    """The committed ranges of each MQ partition, in batch order: contiguous, never
    overlapping; a hole only as a recorded gap, a restart only at a rebase."""
    check = Check("offsets")
    expected: dict[int, int] = {}
    for commit in commit_log.iter_commits():
        restart = commit.committed_by_run.startswith("resolve:rebase")
        for gone in commit.extra.get("dropped_mq_partitions", ()):
            expected.pop(int(gone), None)
        for r in commit.ranges:
            check.checked += 1
            start = r.gap_from if r.gap_from is not None else r.start
            if r.gap_from is not None and r.gap_to is not None and r.start != r.gap_to and r.size:
                check.problems.append(
                    f"batch {commit.batch_id} MQ partition {r.mq_partition}: its gap ends at {r.gap_to} but it "
                    f"reads from {r.start}"
                )
            previous = expected.get(r.mq_partition)
            if previous is not None and not (restart and not r.size):
                if start > previous:
                    check.problems.append(
                        f"batch {commit.batch_id} MQ partition {r.mq_partition}: offsets {previous}..{start - 1} "
                        "were never read and no gap records them"
                    )
                elif start < previous:
                    check.problems.append(
                        f"batch {commit.batch_id} MQ partition {r.mq_partition}: offsets {start}..{previous - 1} "
                        "were committed twice (overlapping ranges)"
                    )
            expected[r.mq_partition] = r.end
    return check


def verify_table(table: Table, registered: list[str] | None, as_of: datetime) -> Verdict:
    """Check ``table`` (see the module doc). ``registered``: the metastore's partition
    locations of a Hive table (None for an Iceberg table: its current snapshot is read).
    ``as_of``: the instant orphans are judged at (the run's time)."""
    commit_log = table.state.commit_log
    files_by_hour, duplicates, referenced = _published_files(table, registered)
    once = Check("files_referenced_once", duplicates, sum(len(f) for f in files_by_hour.values()))
    return Verdict(
        table.name,
        [
            check_offsets(commit_log),
            once,
            _hour_rows(table, files_by_hour),
            _orphans(table, referenced, as_of),
        ],
    )


def _published_files(
    table: Table, registered: list[str] | None
) -> tuple[dict[str, list[str]], list[str], set[str]]:
    """Hour key -> the data files readers read for it (warehouse-relative), the files read
    twice, and every file read."""
    layout, zone = table.layout, table.config.event_time.time_zone
    seen: Counter[str] = Counter()
    by_hour: dict[str, list[str]] = {}
    if registered is None:
        for relative in table.commit.publication.snapshot_files():
            seen[relative] += 1
            if (found := _HOUR.search(relative)) is not None:
                by_hour.setdefault(parse_path(found.group(1), zone).key, []).append(relative)
    else:
        for location in registered:
            base = layout.store_relative(location)
            found = _HOUR.search(location)
            if not base or found is None:
                continue
            for relative in layout.store.files(base):
                seen[relative] += 1
                by_hour.setdefault(parse_path(found.group(1), zone).key, []).append(relative)
    duplicates = [
        f"{f} is read {n} times (through more than one partition)" for f, n in sorted(seen.items()) if n > 1
    ]
    return by_hour, duplicates, set(seen)


def _hour_rows(table: Table, files_by_hour: dict[str, list[str]]) -> Check:
    check = Check("hour_rows")
    state, journal = table.state.commit_log.state(), table.state.journal.state()
    zone = table.config.event_time.time_zone
    for key, entry in sorted(journal.hours.items()):
        if not entry.published:
            if key in files_by_hour:
                check.problems.append(f"hour {key} is {entry.kind}d, not published, but readers see it")
            continue
        check.checked += 1
        files = files_by_hour.get(key, [])
        read = sum(table.layout.store.rows(f) for f in files)
        committed = state.rows_per_hour.get(parse_key_path(key, zone), 0) + entry.late
        if read != entry.rows:
            check.problems.append(
                f"hour {key} v{entry.version}: readers see {read} rows in {len(files)} files, its journal entry "
                f"says {entry.rows}"
            )
        if entry.rows != committed:
            check.problems.append(
                f"hour {key} v{entry.version}: {entry.rows} rows published, the commit log committed {committed} "
                f"({committed - entry.late} on time + {entry.late} late folded in)"
            )
    for key in sorted(set(files_by_hour) - set(journal.hours)):
        if journal.dropped_by_retention(parse_key(key, zone).start):
            check.problems.append(
                f"hour {key} was dropped by retention but readers still see it (tidemark retention "
                f"--table {table.name} unregisters it)"
            )
        else:
            check.problems.append(f"hour {key} is readable but the journal never published it")
    return check


def parse_key_path(key: str, zone: str) -> str:
    """The ``dt=/hr=`` path of an hour key (as the commit log counts rows by)."""
    return parse_key(key, zone).path


def _orphans(table: Table, referenced: set[str], as_of: datetime) -> Check:
    """Data files under the table that no reader reads and nothing will (see the module doc)."""
    import pyarrow.fs as pafs

    check = Check("orphans")
    layout, config = table.layout, table.config
    store = layout.store
    cutoff = as_of - config.output.version_retention
    last = table.state.commit_log.state().last_committed
    quarantined = {e.hour for e in table.state.journal.state().hours.values() if e.quarantined}
    drops = dropped_at(table)
    base, root = layout.relative(layout.table_dir), store.path("").rstrip("/") + "/"
    infos = store.fs.get_file_info(pafs.FileSelector(store.path(base), recursive=True, allow_not_found=True))
    open_dir, sealing = layout.relative(layout.open_dir) + "/", layout.relative(layout.sealing_dir) + "/"
    for info in infos:
        relative = info.path.removeprefix(root)
        if info.type != pafs.FileType.File or not relative.endswith(DATA_SUFFIXES) or relative in referenced:
            continue
        check.checked += 1
        batch = batch_of_file(relative.rsplit("/", 1)[-1]) if relative.startswith(open_dir) else None
        if batch is not None and batch <= last:
            continue  # a committed batch's file of an hour not sealed yet
        hour = _HOUR.search(relative)
        if (
            relative.startswith(sealing)
            and hour
            and parse_path(hour.group(1), config.event_time.time_zone).key in quarantined
        ):
            continue  # a quarantined hour waits there for its release
        dropped = drops.get(parse_path(hour.group(1), config.event_time.time_zone).key) if hour else None
        if dropped is not None:
            if dropped < cutoff:
                check.problems.append(
                    f"{relative}: its hour was dropped by retention at {dropped.isoformat()}, more than "
                    f"{config.output.version_retention} ago (tidemark retention --table {table.name} deletes it)"
                )
            continue  # dropped by retention, deleted after the grace
        mtime = info.mtime
        if mtime is not None and mtime.replace(tzinfo=mtime.tzinfo or as_of.tzinfo) >= cutoff:
            continue  # a step in flight, or a replaced version within its grace
        check.problems.append(
            f"{relative}: no registered version or committed batch holds it, older than the retention "
            f"({config.output.version_retention})"
        )
    return check


def dropped_at(table: Table) -> dict[str, datetime]:
    """Hour key -> when retention dropped it (its journal entry's wall clock)."""
    return {
        key: datetime.fromisoformat(entry.sealed_at)
        for entry in table.state.journal.entries()
        if entry.kind is EntryKind.RETENTION
        for key in entry.dropped
    }
