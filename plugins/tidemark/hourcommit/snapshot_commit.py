"""``SnapshotCommit``: how a new version of a snapshot partition (``snapshot_dt=<label>``)
becomes live: the same protocol as an hour's (stage, complete, publish, collect), for the
snapshot table's partitions, one implementation per kind of warehouse.

- on a filesystem with rename a label's partition is one directory, staged in the run's
  scratch and swapped in by directory exchange; the previous version leaves with the scratch;
- on an object store every version is a directory of its own, named by what it holds
  (``Layout.snapshot_version``), written once with a marker last, and the partition is
  pointed at it in one metastore operation; replaced versions of the label are collected
  after ``output.version_retention`` of the table's processing time.
"""

from __future__ import annotations

import logging
import shutil
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.faults import crash_point
from tidemark.hourcommit.versions import collect_unreferenced, write_version_once
from tidemark.state.layout import Layout
from tidemark.state.storage import Location
from tidemark.tablefs import exchange_directories

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tidemark.state.locks import Lease

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StagedSnapshot:
    """A snapshot version written and not yet live: on local disk a staging directory (swapped
    in by directory exchange), on an object store its own version directory (pointed at)."""

    label: str
    directory: Path
    rows: int
    files: tuple[str, ...]
    location: str = ""  # object stores: the warehouse-relative version directory


@dataclass(frozen=True)
class Retention:
    """How long a replaced version stays, judged by the table's processing time (None before
    its first dump) and kept in ``record``."""

    record: Location
    now: Callable[[], datetime | None]
    keep: timedelta


class SnapshotCommit(ABC):
    """Stages, publishes and discards versions of one snapshot table's partitions."""

    def __init__(self, layout: Layout, partition_column: str) -> None:
        self.layout = layout
        self.store = layout.store
        self.partition_column = partition_column

    @abstractmethod
    def table_location(self) -> Path | str:
        """The snapshot table's location as the metastore registers it (created if need be)."""

    @abstractmethod
    def stage(
        self,
        spark: SparkSession,
        frame: DataFrame,
        label: str,
        partition_dir: Path,
        scratch: Path,
        *,
        run_id: str,
        content: str,
        lease: Lease | None,
    ) -> StagedSnapshot:
        """Write a new version of the label where readers do not see it yet (``content``:
        what it was built from; a retry of the same content reuses a complete version)."""

    @abstractmethod
    def publish(
        self,
        staged: StagedSnapshot,
        partition_dir: Path,
        *,
        metastore: Any,
        spec: dict[str, str],
        ensure_table: Callable[[], None],
    ) -> tuple[Path, bool]:
        """Make the staged version the label's partition; returns (where it is read, atomic)."""

    @abstractmethod
    def discard(
        self, staged: StagedSnapshot, live_location: str, partition_dir: Path, retention: Retention
    ) -> list[str]:
        """After the record: the previous version's files; returns the version directories deleted."""

    @abstractmethod
    def drop_staging(self, scratch: Path) -> None:
        """After a Delta commit (or its recovery): the rows it copied from."""


class RenamingSnapshotCommit(SnapshotCommit):
    """A label's partition is one directory, replaced by exchange."""

    def table_location(self) -> Path | str:
        self.layout.table_dir.mkdir(parents=True, exist_ok=True)
        return self.layout.table_dir

    def stage(
        self,
        spark: SparkSession,
        frame: DataFrame,
        label: str,
        partition_dir: Path,
        scratch: Path,
        *,
        run_id: str,
        content: str,
        lease: Lease | None,
    ) -> StagedSnapshot:
        if scratch.exists():
            log.info("%s: removing the staging of an earlier attempt: %s", self.layout.table, scratch)
            shutil.rmtree(scratch)
        data = scratch / "data"
        frame.write.mode("overwrite").parquet(str(data))
        names = tuple(sorted(p.name for p in data.glob("*.parquet")))
        rows = spark.read.parquet(str(data)).count() if names else 0
        return StagedSnapshot(label, scratch, rows, names)

    def publish(
        self,
        staged: StagedSnapshot,
        partition_dir: Path,
        *,
        metastore: Any,
        spec: dict[str, str],
        ensure_table: Callable[[], None],
    ) -> tuple[Path, bool]:
        partition_dir.parent.mkdir(parents=True, exist_ok=True)
        atomic = exchange_directories(staged.directory / "data", partition_dir)
        crash_point("after_snapshot_swap")
        ensure_table()
        metastore.add_partitions(self.layout.table, [(spec, partition_dir)])
        return partition_dir, atomic

    def discard(
        self, staged: StagedSnapshot, live_location: str, partition_dir: Path, retention: Retention
    ) -> list[str]:
        shutil.rmtree(staged.directory, ignore_errors=True)  # holds the previous version now
        return []

    def drop_staging(self, scratch: Path) -> None:
        shutil.rmtree(scratch, ignore_errors=True)


class VersionedSnapshotCommit(SnapshotCommit):
    """Every version a directory of its own; the partition pointed at it."""

    def table_location(self) -> Path | str:
        return self.layout.location(self.layout.table_dir)

    def stage(
        self,
        spark: SparkSession,
        frame: DataFrame,
        label: str,
        partition_dir: Path,
        scratch: Path,
        *,
        run_id: str,
        content: str,
        lease: Lease | None,
    ) -> StagedSnapshot:
        from tidemark.sparkfiles import write_files

        named = self.layout.relative(self.layout.snapshot_version(partition_dir, run_id, content))
        # one file per task of the frame's last stage (JDBC ranges, the merge's shuffle)
        version = write_version_once(
            self.store,
            named,
            lambda directory: write_files(frame, self.store, directory, "part", frame.rdd.getNumPartitions()),
            lease,
        )
        home = self.layout.warehouse / version.directory
        if version.reused:
            log.info(
                "%s: snapshot %s of run %s already written in %s",
                self.layout.table,
                label,
                run_id,
                self.layout.uri(home),
            )
        names = tuple(path.rsplit("/", 1)[-1] for path in version.files)
        return StagedSnapshot(label, home, version.rows, names, version.directory)

    def publish(
        self,
        staged: StagedSnapshot,
        partition_dir: Path,
        *,
        metastore: Any,
        spec: dict[str, str],
        ensure_table: Callable[[], None],
    ) -> tuple[Path, bool]:
        ensure_table()
        metastore.switch_partitions(self.layout.table, spec, [(spec, self.layout.location(staged.directory))])
        crash_point("after_snapshot_swap")  # the swap here is the metastore's alter
        return staged.directory, True

    def discard(
        self, staged: StagedSnapshot, live_location: str, partition_dir: Path, retention: Retention
    ) -> list[str]:
        """Replaced version directories of the label past the retention (only this label's
        lock holder writes them)."""

        now = retention.now()
        if now is None:  # no processing time yet (a bootstrap before the first dump)
            return []
        return collect_unreferenced(
            self.store,
            retention.record,
            scope=self.layout.relative(partition_dir),
            current={live_location},
            now=now,
            retention=retention.keep,
            owner=self.layout.table,
        )

    def drop_staging(self, scratch: Path) -> None:
        """Every staged version under the Delta table (only the holder of its one snapshot lock
        stages there, and Delta reads none of them)."""
        root = self.layout.relative(self.layout.table_dir)
        for name in (d for d in self.store.children(root) if d.startswith(f"{self.partition_column}=")):
            log.info("%s: removing staged rows copied into the Delta table: %s", self.layout.table, name)
            self.store.delete_dir(f"{root}/{name}")
