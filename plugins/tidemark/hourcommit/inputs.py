"""``HourInputs``: where a dump leaves an hour's batch files and late files, and how a seal
finds and drops them: the publisher's side of the table's ``output.layout``, whatever the
table format.

- ``RenamedInputs`` (a filesystem with rename): a batch's files are renamed into
  ``<table>/_open/<hour>`` and ``<table>__late/<hour>`` when it commits, so every file there
  is committed;
- ``WrittenOnceInputs`` (an object store, or ``output.layout: versioned``): a batch's files are
  written once where they stay, with its lease token in their names, and only the files its
  commit record lists are the batch's (an attempt that lost its batch may have left others).

An Iceberg table's hours are staged as version directories on any store, but it reads its
inputs where the dump put them: the inputs are chosen by the layout, the versions by the
format (``hourcommit.hour_commit``).
"""

from __future__ import annotations

import logging
import shutil
from abc import ABC, abstractmethod
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.errors import ReconciliationError
from tidemark.hourcommit.base import HourWriting, Writer, Written
from tidemark.hourcommit.versions import write_version_once
from tidemark.state.layout import Layout, batch_of_file
from tidemark.tablefs import data_files
from tidemark.time.hours import Hour, parse_path

if TYPE_CHECKING:
    from tidemark.state.commitlog import LogState
    from tidemark.state.journal import JournalState

log = logging.getLogger(__name__)


class HourInputs(ABC):
    """The committed batch and late files of one table's hours, as its dump leaves them."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.store = layout.store

    @abstractmethod
    def batch_files(
        self, directory: Path, *, through: int, after: int, committed: Mapping[int, frozenset[str]]
    ) -> list[Path]:
        """Committed batch files under a warehouse directory of batches ``after`` < b <= ``through``
        (``committed[batch]``: the files its commit record lists, looked up as needed)."""

    @abstractmethod
    def late_inputs(self, hour: Hour) -> Path:
        """The directory of the hour's late batch files (committed ones are read from it)."""

    @abstractmethod
    def late_partition(
        self, hour: Hour, state: LogState, files: HourWriting, writer: Writer
    ) -> tuple[Path, str | None]:
        """side_table: where the late partition of the hour is registered, and the version
        directory it points at (None where the partition is the directory itself)."""

    @abstractmethod
    def drop_batch_files(self, hour: Hour) -> None:
        """The hour's batch files, once its journal entry is written."""

    @abstractmethod
    def sweep_sealed(self, partitions: JournalState, frontier: datetime, zone: str) -> None:
        """Batch files of hours already sealed, left by a crash between the journal entry and
        the cleanup."""


class RenamedInputs(HourInputs):
    """Batch files renamed into ``_open`` (and late files into the late table) on commit."""

    def batch_files(
        self, directory: Path, *, through: int, after: int, committed: Mapping[int, frozenset[str]]
    ) -> list[Path]:
        return [
            p
            for p in data_files(directory)
            if (batch := batch_of_file(p.name)) is not None and after < batch <= through
        ]

    def late_inputs(self, hour: Hour) -> Path:
        return self.layout.late_dir / hour.path

    def late_partition(
        self, hour: Hour, state: LogState, files: HourWriting, writer: Writer
    ) -> tuple[Path, str | None]:
        return self.layout.late_dir / hour.path, None  # its batch files moved there on commit

    def drop_batch_files(self, hour: Hour) -> None:
        shutil.rmtree(self.layout.open_dir / hour.path, ignore_errors=True)

    def sweep_sealed(self, partitions: JournalState, frontier: datetime, zone: str) -> None:
        if not self.layout.open_dir.exists():
            return
        for hour_dir in self.layout.open_dir.glob("dt=*/hr=*"):
            hour = parse_path(str(hour_dir.relative_to(self.layout.open_dir)), zone)
            if hour.end <= frontier and hour.key in partitions.hours:
                log.warning("%s: removing batch files left by a sealed hour %s", self.layout.table, hour.key)
                shutil.rmtree(hour_dir)


class WrittenOnceInputs(HourInputs):
    """Batch files written once in the hidden ``_open`` (late ones in ``<table>__late/_open``),
    a batch's being those its commit record lists."""

    def batch_files(
        self, directory: Path, *, through: int, after: int, committed: Mapping[int, frozenset[str]]
    ) -> list[Path]:
        """Only the files its commit record lists are a batch's: an attempt that lost its
        batch (paused past its lease) may have left files beside the committed attempt's."""
        found = [self.layout.warehouse / f for f in self.store.files(self.layout.relative(directory))]
        return [
            p
            for p in found
            if (batch := batch_of_file(p.name)) is not None
            and after < batch <= through
            and self.layout.relative(p) in committed[batch]
        ]

    def late_inputs(self, hour: Hour) -> Path:
        return self.layout.late_open_dir / hour.path

    def late_partition(
        self, hour: Hour, state: LogState, files: HourWriting, writer: Writer
    ) -> tuple[Path, str | None]:
        """The committed late rows of an hour (hidden batch files in ``<table>__late/_open``)
        written once as a new directory of the late partition, named by its rows and last
        batch; the partition is then pointed at it, so readers never see a late file before
        its batch commits, nor half a version."""
        count = state.late_per_hour[hour.path]
        named = self.layout.versioned_hour(self.layout.late_dir, hour.path, count, state.last_committed)

        def gather(directory: str) -> Written:
            home = self.layout.warehouse / directory
            inputs = files.batch_files(self.late_inputs(hour), through=state.last_committed)
            written = files.write_version(files.read_hour(home, inputs), home, "part", 1)
            rows = sum(n for _, n in written)
            if rows != count:
                raise ReconciliationError(
                    f"{files.config.late_table} hour {hour.key}: {rows} late rows in the batch files != {count} "
                    f"committed by batches <= {state.last_committed}; not registered"
                )
            return written

        written = write_version_once(self.store, self.layout.relative(named), gather, writer.lease)
        target = self.layout.warehouse / written.directory
        return target, self.layout.relative(target)

    def drop_batch_files(self, hour: Hour) -> None:
        for relative in self.store.files(self.layout.relative(self.layout.open_dir / hour.path)):
            self.store.delete(relative)

    def sweep_sealed(self, partitions: JournalState, frontier: datetime, zone: str) -> None:
        open_dir = self.layout.relative(self.layout.open_dir)
        for relative in self.store.files(open_dir):
            dt, hr = relative[len(open_dir) + 1 :].split("/")[:2]  # then any value dirs
            hour = parse_path(f"{dt}/{hr}", zone)
            if hour.end <= frontier and hour.key in partitions.hours:
                self.store.delete(relative)
