"""``HourVersions``: the storage seam of an hour's versions, where a version is staged,
completed, made readable and collected, whatever makes it the one readers see (that is the
publication seam, ``publication.HourPublication``, one per table format; the inputs a dump
leaves are ``inputs.HourInputs``). The three are composed once per table
(``hourcommit.hour_commit``), and no caller asks which one it holds.

A version of an hour goes through the same stages on every store; only how each is done
differs, and only the implementations know:

- **stage**: where writers put its files (a hidden scratch directory renamed into place, or a
  version directory written once under a name of its content);
- **complete**: whether a staged version is whole (a marker written last, naming its files);
- **reveal**: where it is read once published (renamed into the hour's directory, or its own
  version directory, which a partition or a snapshot then points at);
- **collect**: versions nothing points at any more.

Two implementations: ``renaming.RenamingVersions`` (a filesystem with rename: local disk,
HDFS) and ``versioned.OwnDirectoryVersions`` (an object store, ``output.layout: versioned``,
and every Iceberg table). The crash points of each stage are inside them.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tidemark.state.layout import Layout

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tidemark.config import TableConfig
    from tidemark.hourcommit.inputs import HourInputs
    from tidemark.state.commitlog import LogState
    from tidemark.state.journal import HourJournal, JournalEntry, JournalState
    from tidemark.state.locks import Lease
    from tidemark.tableformat import TableFormat
    from tidemark.time.hours import Hour

log = logging.getLogger(__name__)

Compacted = tuple[list[str], int, Path]  # files (warehouse-relative, as readers see them), rows, home
Written = list[tuple[str, int]]  # (warehouse-relative file, rows) per file a writer wrote


class HourWriting(Protocol):
    """What a step hands the commit to read and write an hour's files (``seal.hourfiles``)."""

    spark: SparkSession
    config: TableConfig
    format: TableFormat

    def read_hour(
        self, hour_dir: Path, files: list[Path] | None = None, config: TableConfig | None = None
    ) -> DataFrame: ...

    def write_version(
        self, frame: DataFrame, home: Path, prefix: str, n_files: int, *, sort_by: tuple[str, ...] = ()
    ) -> Written: ...

    def write_staged(self, frame: DataFrame, staging: Path) -> None: ...

    def move_staged(self, staging: Path, target: Path, prefix: str) -> list[str]: ...

    def staged_rows(self, staging: Path) -> int: ...

    def batch_files(self, directory: Path, *, through: int, after: int = -1) -> list[Path]: ...


@dataclass(frozen=True)
class Writer:
    """Who writes a version: the step's run and the lease that fences it (None: unfenced tools)."""

    run_id: str
    lease: Lease | None = None

    @property
    def token(self) -> int:
        return self.lease.token if self.lease is not None else -1

    def check(self) -> None:
        """A writer past its lease never makes anything visible."""
        if self.lease is not None:
            self.lease.check()


@dataclass(frozen=True)
class HourNote:
    """What a publish of an hour announces where the table format keeps it (an Iceberg
    snapshot's summary): the run, the batches the version holds with their offsets per MQ
    partition ({batch: {mq partition: [start, end)}}), and the global ready time."""

    run_id: str
    batches: dict[int, dict[int, list[int]]]
    ready_time: str | None = None
    processing_time: str = ""


@dataclass(frozen=True)
class PublishedHour:
    """An hour as a reader of the table sees it now: its journal's version, the last batch it
    folded in, and the version directory its files lie in (object stores; "" if unknown)."""

    path: str
    version: int
    folded_through: int
    directory: str = ""


class HourVersions(ABC):
    """Stages, completes, reveals and collects the versions of one table's hours."""

    # each version in a directory of its own, which readers are pointed at (else the hour's
    # directory stays where it is and its files change)
    own_directories = False

    def __init__(self, layout: Layout, inputs: HourInputs) -> None:
        self.layout = layout
        self.store = layout.store
        self.inputs = inputs  # where the dump left the hour's batch and late files

    def location(self, path: Path) -> Path | str:
        """A warehouse path as a catalog registers it."""
        return path

    # -- stage and complete: compaction at seal -------------------------------------------
    @abstractmethod
    def compaction_done(self, hour: Hour, through: int) -> bool:
        """Whether the hour's compaction through batch ``through`` is already complete."""

    @abstractmethod
    def hour_inputs(self, hour: Hour, through: int, files: HourWriting) -> list[Path]:
        """The hour's batch files a compaction reads."""

    @abstractmethod
    def claim_compaction(self, hour: Hour, through: int, writer: Writer) -> str:
        """The directory (warehouse-relative) this writer compacts the hour into, its own."""

    @abstractmethod
    def keep_compacted(
        self, hour: Hour, directory: str, written: Written, *, complete: bool, writer: Writer
    ) -> tuple[list[str], Path]:
        """Mark what a shared compaction wrote for the hour (when ``complete``: it holds the
        committed rows); returns its files as readers will see them, and where they are now."""

    @abstractmethod
    def compact_hour(
        self,
        hour: Hour,
        through: int,
        expected: int,
        *,
        files: HourWriting,
        writer: Writer,
        logged: Callable[..., None],
    ) -> Compacted:
        """The hour compacted alone by Spark (a retry reuses a complete version)."""

    # -- publish ----------------------------------------------------------------------------
    @abstractmethod
    def partition_leaves(self, target: Path, depth: int) -> list[Path]:
        """The directories ``depth`` levels of ``col=value`` below a version (data-derived
        partition columns)."""

    @abstractmethod
    def mark_complete(self, target: Path, hour_key: str, rows: int, version: int) -> None:
        """``_SUCCESS`` for path-based readers, after registration."""

    @abstractmethod
    def published_dir(self, hour: Hour, home: Path) -> Path:
        """Where the hour compacted in ``home`` is read from once published."""

    @abstractmethod
    def reveal(self, home: Path, target: Path, writer: Writer) -> None:
        """Move a checked version from where it was staged to where it is read (if it moves)."""

    @abstractmethod
    def release_dirs(self, hour: Hour, entry: JournalEntry) -> tuple[Path, Path]:
        """(where a quarantined hour's version is kept, where it is read once released)."""

    # -- retention --------------------------------------------------------------------------
    def retired_dirs(self, hours: list[Hour]) -> list[Path]:
        """The directories of dropped hours' versions (a quarantined one's too), to delete
        once the grace has passed (and nothing the publication keeps reads them)."""
        return [
            d
            for hour in hours
            for d in (self.layout.table_dir / hour.path, self.layout.sealing_dir / hour.path)
        ]

    # -- late rows --------------------------------------------------------------------------
    @abstractmethod
    def amend(
        self,
        hour: Hour,
        current: JournalEntry | None,
        new_files: list[Path],
        *,
        version: int,
        through: int,
        files: HourWriting,
        writer: Writer,
    ) -> tuple[Path, list[str], int]:
        """Fold late batch files into the hour as its next version, ready to register;
        returns (where the hour is read, its files, late rows added)."""

    # -- rebuild ----------------------------------------------------------------------------
    @abstractmethod
    def current_files(self, hour: Hour, entry: JournalEntry | None) -> list[Path]:
        """The files readers see for the hour now."""

    @abstractmethod
    def stage_rebuild(
        self,
        hour: Hour,
        *,
        version: int,
        through: int,
        scratch: Path,
        files: HourWriting,
        writer: Writer,
        rows_of: Callable[[Path], DataFrame | None],
        reconcile: Callable[[Path, int], None],
        n_files: int,
    ) -> tuple[Path, list[str], int]:
        """Write a rebuilt hour where readers do not see it: ``rows_of(receipts)`` gives its
        rows (None: no batch fed it), ``reconcile(receipts, rows)`` refuses a wrong count.
        Returns (the staged version, its files as readers will see them, rows)."""

    @abstractmethod
    def publish_rebuilt(
        self,
        hour: Hour,
        *,
        current_version: int,
        through: int,
        staged: Path,
        written: list[str],
        rows: int,
        writer: Writer,
        register: Callable[[Path], None],
    ) -> bool:
        """Make a staged rebuild the hour readers see; returns whether that was atomic."""

    # -- the merge reads published hours ----------------------------------------------------
    @abstractmethod
    def read_published(self, files: HourWriting, hours: list[PublishedHour]) -> DataFrame:
        """The rows of the hours as published now (their current versions)."""

    # -- collect ----------------------------------------------------------------------------
    @abstractmethod
    def sweep_sealed(self, partitions: JournalState, zone: str) -> None:
        """Leftovers of hours already sealed: a zombie's staging beside a published hour."""

    @abstractmethod
    def collect(
        self,
        config: TableConfig,
        journal: HourJournal,
        *,
        state: LogState,
        partitions: JournalState,
        late_locations: dict[str, str],
        writer: Writer,
        registered: Callable[[], list[str]],
    ) -> list[str]:
        """Versions no partition points at, deleted past the retention; returns those deleted."""
