"""CDC snapshots as versions of one open table (``cdc.snapshot_format: delta | iceberg``): the
model both formats share, one class per format below it (``DeltaSnapshot``,
``IcebergSnapshot``), chosen once by ``tidemark.snapshot.formats``.

The model. The table holds the newest state. Each snapshot label is one version of it: its
record in the snapshot log carries ``table_version`` (the Delta version; the Iceberg
snapshot's sequence number), and the commit that made that version carries the record itself
(Delta: commitInfo; Iceberg: the snapshot summary, ``tidemark.record``).

Exactly once. The table's commit is the commit point and the snapshot log follows it. A job
that dies between the two leaves a commit the log lacks; every bootstrap and merge first
records such commits (``recover``) under the table's snapshot lock, so the retry of that run
finds its record and does nothing. A commit that did not land as the version planned (another
writer took it) is an error, never recorded.

Forward only. A merge applies the sealed increment hours to the current version with one
MERGE (delete / update when the change is at least as new / insert): its cost follows the
increment, not the snapshot. A late change (``late_policy: amend``) to an hour that an
earlier version already holds is corrected forward: the next merge of the newest snapshot
recomputes the state from the newest snapshot still current (by time travel) and MERGEs only
the difference. Older versions keep the state as it was merged (history is not rewritten).

After each commit, under the lock: the labels are published (Delta: the views; Iceberg:
tags) and what no reader can still be reading is removed. Both are derived state, made good by
the next merge or bootstrap.

Grace. A replaced version (a label merged again, a label past ``cdc.keep_labels``, the
previous current state) stays whole for ``output.version_retention`` of wall-clock time after
its replacement, so a query that planned on it before finishes with its rows. The records
readable at any moment of that window are computed from the snapshot log (``readable_since``):
each record is stamped when it is recorded, after its table commit, so the window is never
shorter than the setting.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import MergeError
from tidemark.faults import crash_point
from tidemark.masking import exception_line
from tidemark.settings import Settings
from tidemark.snapshot.snapshots import SnapshotLog, SnapshotRecord, SnapshotStore, format_name
from tidemark.state.layout import Layout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

RECORD_KEY = "tidemark.record"
DELETE_FLAG = "_tm_delete"

MERGE_COUNTS = {
    "inserted": "num_target_rows_inserted",
    "updated": "num_target_rows_updated",
    "deleted": "num_target_rows_deleted",
    "files_rewritten": "num_target_files_removed",
}


@dataclass(frozen=True)
class TableCommit:
    """One commit of the snapshot table as the recovery reads it."""

    version: int
    record: dict[str, Any] | None  # the snapshot record it carries, if tidemark made it
    metrics: dict[str, Any] = field(default_factory=dict)  # in delta-rs' names (MERGE_COUNTS)
    maintenance: bool = False  # tidemark's housekeeping (a Delta VACUUM): names no state


def newest_labels(live: Iterable[SnapshotRecord], keep: int) -> list[SnapshotRecord]:
    """The labels readable by name, oldest first: the newest ``keep`` live ones by version."""
    return sorted((r for r in live if r.table_version >= 0), key=lambda r: r.table_version)[-keep:]


def readable_since(records: Iterable[SnapshotRecord], keep: int, since: datetime) -> list[SnapshotRecord]:
    """Every record readable by name at some moment at or after ``since``, oldest first: the
    kept labels of each state of the log still in effect then. A state ends when the next
    version is recorded (``created_at``, stamped after that version's table commit)."""
    ordered = sorted((r for r in records if r.table_version >= 0), key=lambda r: (r.table_version, r.seq))
    live: dict[str, SnapshotRecord] = {}
    readable: dict[tuple[str, int], SnapshotRecord] = {}
    for at, record in enumerate(ordered):
        live[record.label] = record
        successor = ordered[at + 1] if at + 1 < len(ordered) else None
        if successor is None or _instant(successor.created_at) > since:
            readable.update({(r.label, r.version): r for r in newest_labels(live.values(), keep)})
    return sorted(readable.values(), key=lambda r: r.table_version)


def _instant(text: str) -> datetime:
    stamp = datetime.fromisoformat(text)
    return stamp if stamp.tzinfo else stamp.astimezone()


class VersionedSnapshot(ABC):
    """The table of a CDC table's snapshots, and how a version of it is committed."""

    def __init__(self, spark: SparkSession, config: TableConfig, settings: Settings) -> None:
        assert config.cdc is not None
        self.spark = spark
        self.config = config
        self.cdc = config.cdc
        self.kind = format_name(config)
        self.layout = Layout(settings, config.snapshot_table)
        self.uri = self.layout.uri(self.layout.table_dir)
        self.store = SnapshotStore(spark, config, settings)
        self.columns = self.store.columns()
        self.names = [name for name, _ in self.columns]

    # -- what a format provides -----------------------------------------------------------
    @abstractmethod
    def exists(self) -> bool: ...

    @abstractmethod
    def current_version(self) -> int: ...

    @abstractmethod
    def commits_after(self, version: int) -> list[TableCommit]:
        """The table's commits after ``version``, oldest first."""

    @abstractmethod
    def files(self, version: int) -> list[str]:
        """The data files of ``version`` (URIs)."""

    @abstractmethod
    def read(self, record: SnapshotRecord) -> DataFrame:
        """The state ``record`` names (its version, by time travel), the snapshot's columns."""

    @abstractmethod
    def publish(self, head: SnapshotRecord, kept: Sequence[SnapshotRecord]) -> str:
        """Make the kept labels readable by name; raises on failure (``after_commit`` logs)."""

    @abstractmethod
    def vacuum(self, kept: Sequence[SnapshotRecord]) -> list[str]:
        """Remove what no record of ``kept`` (readable within the grace) and not the current
        version reads; logs its failures."""

    @abstractmethod
    def write_overwrite(self, files: Sequence[str], pending: SnapshotRecord, version: int) -> None:
        """Commit the staged files as the whole state, as ``version``, carrying ``pending``."""

    @abstractmethod
    def write_merge(
        self, source: DataFrame, pending: SnapshotRecord, version: int, *, only_newer: bool
    ) -> dict[str, Any]:
        """One MERGE of ``source`` committed as ``version`` carrying ``pending``; its metrics
        in delta-rs' names."""

    @abstractmethod
    def data_file_sizes(self) -> list[int]:
        """The bytes of each data file of the current version."""

    @abstractmethod
    def rewrite_files(self) -> None:
        """One maintenance commit of the current rows in files of ``cdc.snapshot_file_size``
        (Delta's OPTIMIZE, Iceberg's ``rewrite_data_files``): no row changes, no record; the
        labels keep reading their own versions."""

    def compact(self, *, dry_run: bool = False) -> dict[str, Any]:
        """Merge the current version's small files back when ``compaction`` says they are due
        (a MERGE writes new files of the changed keys only, so the state fragments over
        time); call under the snapshot lock. The replaced files stay for the labels that
        read them and go with the VACUUM or expiry of those labels, after the grace."""
        if not self.exists():
            return {}
        before = self.data_file_sizes()
        due = self.config.compaction.due(before, int(self.cdc.snapshot_file_size))
        done = {"files_before": len(before), "bytes": sum(before), "due": due}
        if due and not dry_run:
            self.rewrite_files()
            done["files_after"] = len(self.data_file_sizes())
            log.info(
                "%s: %s's %s files (%s bytes) merged back into %s",
                self.config.table,
                self.uri,
                len(before),
                sum(before),
                done["files_after"],
            )
        return done

    def may_have_unrecorded(self, known: int) -> bool:
        """A cheap check before reading the history (Delta: its app transaction)."""
        return self.current_version() > known

    # -- the log follows the table's commits ------------------------------------------------
    def recover(self, snapshots: SnapshotLog) -> list[SnapshotRecord]:
        """Record the commits the snapshot log lacks (their job died after the commit);
        returns what was recorded. Call under the snapshot lock."""
        if not self.exists():
            return []
        records = list(snapshots.records())
        known = max((r.table_version for r in records), default=-1)
        if not self.may_have_unrecorded(known):
            return []
        recorded_runs = {r.run_id for r in records}
        recovered = []
        for commit in self.commits_after(known):
            if commit.record is None:
                continue
            pending = SnapshotRecord.from_json(commit.record)
            if pending.run_id in recorded_runs:
                continue
            done = self._finished(pending, commit.version, commit.metrics)
            recovered.append(snapshots.append(done))
            log.warning(
                "%s: %s version %s of %s (run %s, snapshot %s) was committed but not recorded "
                "(its job stopped in between): recorded now",
                self.config.table,
                self.kind,
                commit.version,
                self.uri,
                pending.run_id,
                pending.label,
            )
        return recovered

    def head(self, records: Sequence[SnapshotRecord]) -> SnapshotRecord | None:
        """The record of the table's current version (after ``recover``): the one naming it,
        or the newest record when only tidemark's housekeeping committed after it."""
        if not self.exists():
            return None
        version = self.current_version()
        for record in records:
            if record.table_version == version:
                return record
        newest = max(records, key=lambda r: r.table_version, default=None)
        if (
            newest is not None
            and version > newest.table_version
            and all(c.maintenance for c in self.commits_after(newest.table_version))
        ):
            return newest
        raise MergeError(
            f"{self.config.table}: {self.uri} is at {self.kind} version {version}, which no snapshot record "
            "names (was it written by something other than tidemark?); bootstrap again "
            f"(tidemark bootstrap --table {self.config.table}) to start a new state"
        )

    def kept(self, snapshots: SnapshotLog) -> list[SnapshotRecord]:
        """The labels still readable, oldest first: the newest ``cdc.keep_labels`` live ones
        by version (an older label has expired)."""
        return newest_labels(snapshots.live().values(), self.cdc.keep_labels)

    def after_commit(self, snapshots: SnapshotLog) -> str:
        """Publish the kept labels, then remove what no kept label reads; call under the
        snapshot lock, after the record. A failure is logged and returned (``labels stale:
        ...``), never the commit's failure: the next merge or bootstrap makes it good."""
        kept = self.kept(snapshots)
        head = self.head(kept)  # the newest record of all: the live one of its label
        if head is None:
            return f"no {self.kind} table"
        try:
            crash_point("snapshot_views")
            published = self.publish(head, kept)
        except Exception as exc:  # the catalog's or Spark's (Py4J) refusal: the commit stands
            log.error(
                "%s: snapshot %s is committed (%s version %s), but its labels were not published: %s "
                "-- readers of %s see the previous version's labels until the next merge publishes them",
                self.config.table,
                head.ref,
                self.kind,
                head.table_version,
                exception_line(exc)[:1000],
                self.config.snapshot_table,
            )
            return f"labels stale: {type(exc).__name__}"
        grace = self.config.output.version_retention
        readable = readable_since(snapshots.records(), self.cdc.keep_labels, datetime.now(UTC) - grace)
        if len(readable) > len(kept):
            log.info(
                "%s: %s replaced version(s) of %s stay within the grace period (output.version_retention = %s): %s",
                self.config.table,
                len(readable) - len(kept),
                self.uri,
                grace,
                ", ".join(r.ref for r in readable if r not in kept),
            )
        self.vacuum(readable)
        return published

    # -- writing ---------------------------------------------------------------------------
    def overwrite(self, files: Sequence[str], pending: SnapshotRecord) -> SnapshotRecord:
        """A bootstrap: the staged Parquet files (URIs or paths; the bootstrap sorts them by
        key) become the whole state, in files of ``cdc.snapshot_file_size`` (one commit)."""
        version = self.current_version() + 1 if self.exists() else 0
        self.write_overwrite(files, pending, version)
        return self._finished(pending, self.current_version(), {})

    def merge(self, source: DataFrame, pending: SnapshotRecord, *, only_newer: bool) -> SnapshotRecord:
        """One MERGE of ``source`` (snapshot columns + ``_tm_delete``, one row per key).
        ``only_newer``: a row applies only when its version is at least the target's (the
        increment path); otherwise it applies as is (a difference already computed)."""
        metrics = self.write_merge(source, pending, self.current_version() + 1, only_newer=only_newer)
        log.info(
            "%s: MERGE into %s (%s): %s source rows, %s inserted, %s updated, %s deleted; %s files rewritten",
            self.config.table,
            self.uri,
            self.kind,
            metrics.get("num_source_rows"),
            metrics.get("num_target_rows_inserted"),
            metrics.get("num_target_rows_updated"),
            metrics.get("num_target_rows_deleted"),
            metrics.get("num_target_files_removed"),
        )
        return self._finished(pending, self.current_version(), metrics)

    def _finished(self, pending: SnapshotRecord, version: int, metrics: dict[str, Any]) -> SnapshotRecord:
        """The record of a committed version: its rows (counted before a bootstrap; a merge's
        from the rows before and the MERGE's metrics) and its files."""
        rows = pending.rows
        if rows < 0:
            rows = (
                int(pending.changes.get("rows_before", 0))
                + int(metrics.get("num_target_rows_inserted", 0))
                - int(metrics.get("num_target_rows_deleted", 0))
            )
        changes = {
            **pending.changes,
            **{k: int(metrics[m]) for k, m in MERGE_COUNTS.items() if metrics.get(m) is not None},
        }
        names = tuple(sorted(Path(f).name for f in self.files(version)))
        # stamped now, after the commit: the grace of the versions it replaces starts no earlier
        recorded = datetime.now().astimezone().isoformat()
        return replace(
            pending, rows=rows, files=names, table_version=version, changes=changes, created_at=recorded
        )
