"""``HourVersions`` on a filesystem with rename (local disk, HDFS): a version is staged in a
hidden directory of its writer's own and renamed into place.

- **stage**: a scratch directory under ``.tidemark_staging`` marked with the writer's lease
  token (older tokens' scratch is removed first); the compacted hour then enters the hidden
  ``<table>/_sealing/<hour>`` in one rename, which a directory already there refuses (the
  local disk's fence against a seal paused past its lease);
- **complete**: a marker (``_tidemark_compacted.json``) naming the files and rows, written
  last; a marker whose rows differ from the commit log's is stale and the hour is compacted
  again and exchanged in whole;
- **reveal**: rename (or ``renameat2`` exchange) into ``<table>/<hour>``, where the hour's
  partitions stay (``ADD IF NOT EXISTS``), then ``_SUCCESS``; an amend moves its new files into
  the live directory one rename each;
- **collect**: nothing: a replaced version is swapped into the writer's scratch, removed with it.
"""

from __future__ import annotations

import errno
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.errors import VersionConflictError
from tidemark.faults import crash_point
from tidemark.hourcommit.base import (
    Compacted,
    HourVersions,
    HourWriting,
    PublishedHour,
    Writer,
    Written,
)
from tidemark.state.layout import compaction_marker, sealed_file_prefix, write_success
from tidemark.state.storage import read_json, replace_atomically
from tidemark.tablefs import data_files, exchange_directories
from tidemark.time.hours import Hour, parse_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from tidemark.config import TableConfig
    from tidemark.state.commitlog import LogState
    from tidemark.state.journal import HourJournal, JournalEntry, JournalState

log = logging.getLogger(__name__)

SCRATCH_OWNER = "_owner.json"  # the lease token of a seal's scratch directory


class RenamingVersions(HourVersions):
    """Versions staged aside and renamed into place (one filesystem: staging renames in)."""

    # -- stage and complete ---------------------------------------------------------------
    def compaction_done(self, hour: Hour, through: int) -> bool:
        target, hidden = self.layout.table_dir / hour.path, self.layout.sealing_dir / hour.path
        return (
            read_json(compaction_marker(target)) is not None
            or read_json(compaction_marker(hidden)) is not None
        )

    def hour_inputs(self, hour: Hour, through: int, files: HourWriting) -> list[Path]:
        """Every batch file of the hour (all committed: a batch publishes them on commit)."""
        source = self.layout.open_dir / hour.path
        return sorted(source.rglob("*.parquet")) if source.exists() else []

    def claim_compaction(self, hour: Hour, through: int, writer: Writer) -> str:
        self._clear_residue(hour, writer)
        return self.layout.relative(self._scratch("compacted", hour, writer))

    def _clear_residue(self, hour: Hour, writer: Writer) -> None:
        """A crashed attempt's version of the hour, removed by the lease's holder only (a seal
        paused past its lease must not delete what its successor published); a directory with
        a compaction marker is a finished version, never residue."""
        writer.check()
        for residue in (self.layout.sealing_dir / hour.path, self.layout.table_dir / hour.path):
            if read_json(compaction_marker(residue)) is not None:
                raise VersionConflictError(
                    f"{self.layout.table}: hour {hour.key} was compacted meanwhile: {residue}"
                )
            shutil.rmtree(residue, ignore_errors=True)

    def keep_compacted(
        self, hour: Hour, directory: str, written: Written, *, complete: bool, writer: Writer
    ) -> tuple[list[str], Path]:
        home = self.layout.warehouse / directory
        target = self.layout.table_dir / hour.path  # the files are named at their place
        files = [
            self.layout.relative(target / (self.layout.warehouse / f).relative_to(home)) for f, _ in written
        ]
        if complete:
            replace_atomically(compaction_marker(home), {"files": files, "rows": sum(n for _, n in written)})
        return files, self._enter(home, self.layout.sealing_dir / hour.path, hour, writer)

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
        """Rewrite the hour's batch files as few files of about target_file_size.

        A marker records the result, so a retry after registration never rewrites a visible
        hour for nothing. A marker whose count differs from the commit log's is stale: a seal
        failed after compacting and before its journal entry (metastore, quality gate, a kill),
        and batches committed rows for the hour since. The hour is then compacted again from
        its batch files (all still in ``_open``) and swapped in whole, so readers of an hour
        registered by the failed attempt see the old files or the new ones, never a mix.

        Until it passes the quality gate, a compacted hour lives in the hidden ``_sealing``
        directory (readers by path and ``MSCK REPAIR`` never see it; a quarantined hour stays
        there until it is released)."""
        target = self.layout.table_dir / hour.path
        hidden = self.layout.sealing_dir / hour.path
        home = target if read_json(compaction_marker(target)) is not None else hidden
        done = read_json(compaction_marker(home))
        table = files.config.table
        if done is not None and int(done["rows"]) == expected:
            log.info("%s: hour %s already compacted (%s files)", table, hour.key, len(done["files"]))
            return list(done["files"]), int(done["rows"]), home
        if done is None:
            self._clear_residue(hour, writer)  # a crashed attempt's; never registered
            private = self._scratch("compacted", hour, writer)
            compacted, rows = self._compact_into(
                hour, private, target, files=files, writer=writer, logged=logged
            )
            return compacted, rows, self._enter(private, hidden, hour, writer)
        log.warning(
            "%s: hour %s was compacted with %s rows by a seal that failed before its journal entry; "
            "batches committed since hold %s rows for it: compacting again",
            table,
            hour.key,
            done["rows"],
            expected,
        )
        scratch = self._scratch("recompact", hour, writer)
        new_dir = scratch / "hour"
        compacted, rows = self._compact_into(hour, new_dir, target, files=files, writer=writer, logged=logged)
        writer.check()  # a seal past its lease never swaps its version in
        exchange_directories(new_dir, home)
        shutil.rmtree(scratch, ignore_errors=True)  # now holds the stale version
        return compacted, rows, home

    def _compact_into(
        self,
        hour: Hour,
        directory: Path,
        target: Path,
        *,
        files: HourWriting,
        writer: Writer,
        logged: Callable[..., None],
    ) -> tuple[list[str], int]:
        """Compact the hour's batch files into ``directory`` (which becomes ``target``) with
        Spark; the files are returned as their paths under ``target``."""
        source = self.layout.open_dir / hour.path
        inputs = self.hour_inputs(hour, -1, files)
        directory.mkdir(parents=True, exist_ok=True)
        compacted: list[str] = []
        rows = 0
        if inputs:
            size = sum(p.stat().st_size for p in inputs)
            frame = files.read_hour(source)
            staging = self._scratch("seal", hour, writer) / "files"  # Spark's output: must not exist yet
            from tidemark.sparkfiles import into_files

            files.write_staged(into_files(frame, files.config.output.files_for(size)), staging)
            crash_point("mid_compaction")
            moved = files.move_staged(staging, directory, sealed_file_prefix(1))
            shutil.rmtree(staging.parent, ignore_errors=True)
            rows = files.staged_rows(directory)  # what arrived: its marker never claims more
            compacted = [
                self.layout.relative(target / (self.layout.warehouse / m).relative_to(directory))
                for m in moved
            ]
            logged(hour, inputs=len(inputs), size=size, files=len(compacted), rows=rows, home=target)
        replace_atomically(compaction_marker(directory), {"files": compacted, "rows": rows})
        return compacted, rows

    def _scratch(self, step: str, hour: Hour, writer: Writer) -> Path:
        """An empty scratch directory of this writer's own for ``step`` of ``hour``, marked
        with its lease token; the scratch of older leases of the hour (crashed attempts, or a
        seal paused past its lease: whatever it still writes, its marker counts only what
        arrived) is removed first."""
        for kind in ("seal", "recompact", "compacted"):
            for old in self.layout.staging_root.glob(f"{kind}-{hour.key}-*"):
                owner = read_json(old / SCRATCH_OWNER) or {}
                if int(owner.get("token", -1)) < writer.token:
                    shutil.rmtree(old, ignore_errors=True)
        name = f"{writer.run_id}-t{writer.token}" if writer.lease is not None else writer.run_id
        scratch = self.layout.step_staging(step, hour.key, name)
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        replace_atomically(scratch / SCRATCH_OWNER, {"token": writer.token, "run_id": writer.run_id})
        return scratch

    def _enter(self, private: Path, hidden: Path, hour: Hour, writer: Writer) -> Path:
        """Make this writer's complete directory the hour's hidden one: one rename, which a
        directory already there refuses. So a seal paused past its lease never writes into the
        directory its successor compacted (or quarantined) the hour in."""
        hidden.parent.mkdir(parents=True, exist_ok=True)
        try:
            private.rename(hidden)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            shutil.rmtree(private, ignore_errors=True)  # its own: nobody else reads it
            raise VersionConflictError(
                f"{self.layout.table} hour {hour.key}: {hidden} was written by another seal meanwhile; "
                f"nothing of run {writer.run_id}'s entered it (its lease may have expired): retry"
            ) from None
        (hidden / SCRATCH_OWNER).unlink(missing_ok=True)  # the scratch's mark, not the hour's
        return hidden

    # -- publish ----------------------------------------------------------------------------
    def partition_leaves(self, target: Path, depth: int) -> list[Path]:
        return sorted(p for p in target.glob("/".join("*" for _ in range(depth))) if p.is_dir())

    def mark_complete(self, target: Path, hour_key: str, rows: int, version: int) -> None:
        write_success(target, hour_key, rows, version)

    def published_dir(self, hour: Hour, home: Path) -> Path:
        return self.layout.table_dir / hour.path

    def reveal(self, home: Path, target: Path, writer: Writer) -> None:
        """Move a checked hour from hidden ``_sealing`` to its place (one rename, if not there)."""
        if home == target or not home.exists():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():  # a directory left by an older version: swap, then drop it
            exchange_directories(home, target)
            shutil.rmtree(home, ignore_errors=True)
        else:
            home.rename(target)

    def release_dirs(self, hour: Hour, entry: JournalEntry) -> tuple[Path, Path]:
        return self.layout.sealing_dir / hour.path, self.layout.table_dir / hour.path

    # -- late rows --------------------------------------------------------------------------
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
        """The late rows written by Spark in the table's format into a staging directory,
        then moved into the live hour one rename per file: readers see the old version or the
        new one, never half."""
        target = self.layout.table_dir / hour.path
        staging = self.layout.step_staging("amend", hour.key, f"v{version}")
        shutil.rmtree(staging, ignore_errors=True)
        frame = files.read_hour(self.inputs.late_inputs(hour), new_files)
        files.write_staged(frame.coalesce(1), staging)
        added = files.staged_rows(staging)
        writer.check()
        moved = files.move_staged(staging, target, sealed_file_prefix(version))
        return target, [*(current.files if current else ()), *moved], added

    # -- rebuild ----------------------------------------------------------------------------
    def current_files(self, hour: Hour, entry: JournalEntry | None) -> list[Path]:
        return data_files(self.layout.table_dir / hour.path)

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
        """Write the hour's rows into ``scratch/hour`` (swapped in at publish), its marker last."""
        shutil.rmtree(scratch, ignore_errors=True)
        new_dir = scratch / "hour"
        new_dir.mkdir(parents=True)
        rows = 0
        frame = rows_of(scratch / "receipts")
        if frame is not None:
            written = scratch / "write"
            from tidemark.sparkfiles import into_files

            ordered = into_files(frame, n_files).sortWithinPartitions("_mq_partition", "_mq_offset")
            files.write_staged(ordered, written)
            crash_point("mid_rebuild")
            rows = files.staged_rows(written)
            reconcile(scratch / "receipts", rows)
            files.move_staged(written, new_dir, sealed_file_prefix(1))
        target = self.layout.table_dir / hour.path
        staged = [self.layout.relative(target / p.relative_to(new_dir)) for p in data_files(new_dir)]
        replace_atomically(compaction_marker(new_dir), {"files": staged, "rows": rows})
        return new_dir, staged, rows

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
        """``_SUCCESS`` first (it swaps in with the files), then one directory exchange."""
        write_success(staged, hour.key, rows, current_version + 1)
        target = self.layout.table_dir / hour.path
        target.parent.mkdir(parents=True, exist_ok=True)
        writer.check()
        atomic = exchange_directories(staged, target)
        crash_point("after_swap")
        register(target)
        return atomic

    # -- the merge --------------------------------------------------------------------------
    def read_published(self, files: HourWriting, hours: list[PublishedHour]) -> DataFrame:
        table_dir = self.layout.table_dir
        files.spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        reader = files.spark.read.option("basePath", str(table_dir))
        return files.format.spark_read(reader, *(str(table_dir / h.path) for h in hours))

    # -- collect ----------------------------------------------------------------------------
    def sweep_sealed(self, partitions: JournalState, zone: str) -> None:
        table, sealing = self.layout.table, self.layout.sealing_dir
        for hidden in sealing.glob("dt=*/hr=*"):  # a published hour's is a zombie's
            entry = partitions.hours.get(parse_path(str(hidden.relative_to(sealing)), zone).key)
            if entry is not None and entry.published:
                log.warning("%s: removing %s beside the published hour %s", table, hidden, entry.hour)
                shutil.rmtree(hidden, ignore_errors=True)

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
        return []  # a replaced version left with its writer's scratch
