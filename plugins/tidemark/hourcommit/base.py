"""``HourVersions``: the storage seam of an hour's versions: where a version is written,
completed and made readable, whatever makes it the one readers see (that is the publication
seam, ``publication.HourPublication``, one per table format; the inputs a dump leaves are
``inputs.HourInputs``). The three are composed once per table (``hourcommit.hour_commit``),
and no caller asks which one it holds.

A version of an hour goes through the same stages on every store; only how each is done
differs, and only the implementations know:

- **draft**: where its writer puts its files (``write``: Spark's own writer and a rename
  each, or Spark's tasks writing each file once under its final name), of its own (a scratch directory renamed into
  place later, or a version directory written once under a name of its content), or a
  complete version a retry finds and reuses;
- **complete**: the version is whole (a marker written last, naming its files);
- **reveal**: where it is read once published (renamed into the hour's directory, or its own
  version directory, which a partition or a snapshot then points at);
- **where**: the directory a version of an hour lies in now.

Two implementations: ``renaming.RenamingVersions`` (a filesystem with rename: local disk,
HDFS) and ``versioned.OwnDirectoryVersions`` (an object store, ``output.layout: versioned``,
and every Iceberg table). What is written into a draft, and the order of the steps, are the
seal's (``seal.compaction``, ``seal.late``, ``seal.rebuild``, ``seal.recompact``); the
crash points and fences of each stage are the store's.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tidemark.state.layout import Layout, version_dir_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tidemark.config import TableConfig
    from tidemark.hourcommit.versions import WrittenVersion
    from tidemark.state.journal import JournalEntry, JournalState
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
    """A version of an hour as the journal knows it: its hour's path, its version, the last
    batch it folded in, the version directory its files lie in (own directories; "" if
    unknown), and whether readers see it (a quarantined one waits for its release)."""

    path: str
    version: int
    folded_through: int
    directory: str = ""
    published: bool = True

    @classmethod
    def of(cls, hour: Hour, entry: JournalEntry) -> PublishedHour:
        """The version a journal entry of ``hour`` names."""
        found = {d for f in entry.files if (d := version_dir_of(f)) is not None}
        directory = found.pop() if len(found) == 1 else ""
        return cls(hour.path, entry.version, entry.folded_through_batch, directory, entry.published)


@dataclass(frozen=True)
class Draft:
    """A version of an hour being written: its writer writes into ``directory`` (its own),
    files named ``<prefix>-NNNNN``; readers will see them under ``named_under``. ``done``: a
    complete version a retry found, reused as it is (nothing to write). ``appends``: the
    version adds files beside the hour's current ones (else it holds the whole hour)."""

    hour: Hour
    step: str  # compact, amend or rebuild
    version: int
    directory: Path
    named_under: Path
    prefix: str
    done: WrittenVersion | None = None
    appends: bool = False
    replaces: Path | None = None  # a stale complete version this one is exchanged for


class HourVersions(ABC):
    """Drafts, completes, reveals and finds the versions of one table's hours."""

    # each version in a directory of its own, which readers are pointed at (else the hour's
    # directory stays where it is and its files change); replaced versions are then collected
    # (``versions.VersionCollector``), where a renamed one leaves with its writer's scratch
    own_directories = False

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.store = layout.store

    @abstractmethod
    def draft(
        self,
        hour: Hour,
        step: str,
        *,
        version: int,
        through: int,
        writer: Writer,
        rows: int | None = None,
        scratch: Path | None = None,
    ) -> Draft:
        """Claim where ``writer`` writes version ``version`` of the hour, holding its batches
        through ``through`` (``rows``: the rows a complete version must hold to be reused;
        ``scratch``: the step's own scratch directory, where it has one)."""

    @abstractmethod
    def write(
        self,
        draft: Draft,
        frame: DataFrame,
        n_files: int,
        *,
        files: HourWriting,
        sort_by: tuple[str, ...] = (),
    ) -> Written:
        """Write ``frame`` into a draft as about ``n_files`` files ``<prefix>-NNNNN`` (the extra
        partition columns as ``col=value/`` directories), each sorted by ``sort_by``; returns
        (warehouse-relative file, rows) per file, as they lie in the draft."""

    @abstractmethod
    def complete(self, draft: Draft, written: Written, writer: Writer) -> tuple[list[str], Path]:
        """Mark what was written into a draft as a whole version (its marker last); returns its
        files as readers will see them, and where the version lies now."""

    @abstractmethod
    def reveal(self, hour: Hour, home: Path, *, version: int, writer: Writer) -> tuple[Path, bool]:
        """Make the complete version ``version`` at ``home`` the hour's directory readers are
        pointed at (the publication then points them); returns that directory and whether
        a version it replaced was exchanged atomically."""

    @abstractmethod
    def where(self, version: PublishedHour) -> Path:
        """The directory a version of an hour lies in now."""

    @abstractmethod
    def sweep(self, partitions: JournalState, zone: str) -> None:
        """Leftovers beside hours already published: a zombie's version of one."""
