"""Garbage collection of replaced partition versions (object stores): a directory no
partition points at is recorded when first seen and deleted only once the pipeline's
processing time has moved ``output.version_retention`` past that."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers.tables import fresh_table
from tidemark.config import TableConfig
from tidemark.errors import VersionConflictError
from tidemark.hourcommit.versions import (
    OWNER_RECORD,
    VersionCollector,
    claim_version,
    collect_unreferenced,
    entry_directory,
    version_dirs,
    write_version_once,
)
from tidemark.seal.hourfiles import step_entry
from tidemark.settings import Settings
from tidemark.state.commitlog import LogState
from tidemark.state.journal import EntryKind, HourJournal, JournalEntry, JournalState
from tidemark.state.layout import COMPACTED_MARKER, Layout
from tidemark.state.locks import TableLock
from tidemark.state.storage import Location, read_json
from tidemark.tablefs import Store
from tidemark.time.hours import Hour, parse_key
from tidemark.time.watermarks import ReadyTime

pytestmark = pytest.mark.unit


def at(processing: str) -> LogState:
    return LogState(last_committed=4, ready=ReadyTime(time=processing, processing_time=processing))


def wall(processing: str) -> datetime:
    """The wall clock of a test's seal: as far along as its processing time."""
    return datetime.fromisoformat(processing)


def sealed_once(config: TableConfig, hour: Hour) -> JournalState:
    """The journal of a table whose ``hour`` was sealed once (version 1, through batch 4)."""
    partitions = JournalState()
    partitions.apply(
        step_entry(
            config,
            "seal-1",
            hour,
            at("2026-11-22T12:00:00+00:00"),
            partitions,
            kind=EntryKind.SEAL,
            version=1,
            rows=1,
            files=[],
            quality={},
        )
    )
    return partitions


def test_version_dirs_are_found_from_their_files() -> None:
    files = [
        "t/dt=2026-11-22/hr=10/_v0001-b0000000004/part-00000.parquet",
        "t/dt=2026-11-22/hr=10/_v0001-b0000000004/_tidemark_compacted.json",
        "t__late/dt=2026-11-22/hr=10/_v0003-b0000000007/part-00000.parquet",
        "t/_open/dt=2026-11-22/hr=11/part-b0000000005-p0-000000000000.parquet",
        "t_snapshot/snapshot_dt=base/_s0123456789ab/part-00000.parquet",
    ]
    assert version_dirs(files) == {
        "t/dt=2026-11-22/hr=10/_v0001-b0000000004",
        "t__late/dt=2026-11-22/hr=10/_v0003-b0000000007",
        "t_snapshot/snapshot_dt=base/_s0123456789ab",
    }


def test_a_version_is_written_once_a_crashed_attempt_rewritten_a_complete_one_reused(tmp_path: Path) -> None:
    store = Store.of(str(tmp_path))
    directory = "t/dt=2026-11-22/hr=10/_v0001-b0000000004"
    store.write_json(f"{directory}/part-00009.parquet", "left by a crashed attempt")
    calls: list[int] = []

    def write(into: str) -> list[tuple[str, int]]:
        calls.append(1)
        store.write_json(f"{into}/part-00000.parquet", "rows")
        return [(f"{into}/part-00000.parquet", 7)]

    first = write_version_once(store, directory, write)
    assert (first.files, first.rows, first.reused) == ([f"{directory}/part-00000.parquet"], 7, False)
    assert store.all_files(directory) == [
        f"{directory}/{COMPACTED_MARKER}",
        f"{directory}/part-00000.parquet",
    ]
    again = write_version_once(store, directory, write)
    assert (again.files, again.rows, again.reused, len(calls)) == (first.files, 7, True, 1)

    def refused(into: str) -> list[tuple[str, int]]:
        raise ValueError("rows do not reconcile")

    other = "t/dt=2026-11-22/hr=11/_v0001-b0000000004"
    with pytest.raises(ValueError):
        write_version_once(store, other, refused)
    assert store.read_json(f"{other}/{COMPACTED_MARKER}") is None  # no marker: never reused


def test_replaced_versions_are_deleted_after_the_retention(settings: Settings, tmp_path: Path) -> None:
    config, settings = fresh_table(settings, tmp_path, output__version_retention="1h")
    settings = replace(settings, warehouse=str(tmp_path / "wh"), state_uri=str(tmp_path / "state"))
    layout = Layout(settings, config.table)
    journal = HourJournal(settings.state_location, config.table)
    hour = parse_key("2026-11-22T10", "UTC")
    sealed = layout.versioned_hour(layout.table_dir, hour.path, 1, 4)
    recompacted_away = layout.versioned_hour(layout.table_dir, hour.path, 1, 2)
    late_now = layout.versioned_hour(layout.late_dir, hour.path, 5, 4)
    late_before = layout.versioned_hour(layout.late_dir, hour.path, 2, 3)
    for directory in (sealed, recompacted_away, late_now, late_before):
        directory.mkdir(parents=True)
        (directory / "part-00000.parquet").write_bytes(b"x")
        (directory / COMPACTED_MARKER).write_text("{}")
    partitions = sealed_once(config, hour)
    late = {hour.key: layout.relative(late_now)}
    collector = VersionCollector(config, layout, journal)

    assert (
        collector.collect(
            at("2026-11-22T12:00:00+00:00"), partitions, late, wall=wall("2026-11-22T12:00:00+00:00")
        )
        == []
    )
    assert (
        collector.collect(
            at("2026-11-22T12:59:00+00:00"), partitions, late, wall=wall("2026-11-22T12:59:00+00:00")
        )
        == []
    )  # within 1h
    assert recompacted_away.exists() and late_before.exists()
    deleted = collector.collect(
        at("2026-11-22T13:00:00+00:00"), partitions, late, wall=wall("2026-11-22T13:00:00+00:00")
    )
    assert sorted(deleted) == sorted(layout.relative(d) for d in (recompacted_away, late_before))
    assert not recompacted_away.exists() and not late_before.exists()
    assert sealed.exists() and late_now.exists()  # what partitions point at is never touched
    assert (
        collector.collect(
            at("2026-11-22T14:00:00+00:00"), partitions, late, wall=wall("2026-11-22T14:00:00+00:00")
        )
        == []
    )


def test_a_directory_the_metastore_points_at_is_kept_whatever_the_journal_says(
    settings: Settings, tmp_path: Path
) -> None:
    """A rebuild killed after its switch and before its journal entry: the partition points at
    version 2, the journal still names version 1. Version 2 is kept while the metastore points
    at it (registered locations map back to warehouse paths, s3a:// or s3://)."""
    config, settings = fresh_table(settings, tmp_path, output__version_retention="0s")
    settings = replace(settings, warehouse="s3://lake/wh", state_uri=str(tmp_path / "state"))
    layout = Layout(settings, config.table)
    hour = parse_key("2026-11-22T10", "UTC")
    v2 = layout.hour_version(hour.path, 2, 4)
    assert layout.store_relative(f"s3a://lake/wh/{layout.relative(v2)}") == layout.relative(v2)
    assert layout.store_relative(f"s3://lake/wh/{layout.relative(v2)}/") == layout.relative(v2)
    assert layout.store_relative("s3a://elsewhere/t/dt=2026-11-22/hr=10") == ""

    local = replace(settings, warehouse=str(tmp_path / "wh"))
    local_layout = Layout(local, config.table)
    for version in (1, 2):
        directory = local_layout.hour_version(hour.path, version, 4)
        directory.mkdir(parents=True)
        (directory / "part-00000.parquet").write_bytes(b"x")
    partitions = sealed_once(config, hour)
    collector = VersionCollector(config, local_layout, HourJournal(local.state_location, config.table))
    pointed = [str(local_layout.hour_version(hour.path, 2, 4))]
    assert (
        collector.collect(
            at("2026-11-22T13:00:00+00:00"), partitions, {}, pointed, wall=wall("2026-11-22T13:00:00+00:00")
        )
        == []
    )
    assert collector.collect(
        at("2026-11-22T14:00:00+00:00"), partitions, {}, wall=wall("2026-11-22T14:00:00+00:00")
    ) == [
        local_layout.relative(local_layout.hour_version(hour.path, 2, 4))
    ]  # without the metastore's word it would have gone


def test_late_versions_past_9999_rows_are_still_version_directories() -> None:
    files = [
        "t__late/dt=2026-11-22/hr=10/_v12345-b0000000007/part-00000.parquet",
        "t__late/dt=2026-11-22/hr=10/_v1000000-b0000000008/part-00000.parquet",
    ]
    assert version_dirs(files) == {
        "t__late/dt=2026-11-22/hr=10/_v12345-b0000000007",
        "t__late/dt=2026-11-22/hr=10/_v1000000-b0000000008",
    }


def test_scopes_sharing_one_record_keep_each_others_replaced_versions(tmp_path: Path) -> None:
    """Two snapshot labels cleaned in turn: the second one's cleanup must not forget when the
    first one's replaced version was first seen (it would never be deleted)."""

    store = Store.of(str(tmp_path / "wh"))
    record = Location(tmp_path / "state" / "replaced_versions.json")
    for label in ("a", "b"):
        for digest in ("000000000001", "000000000002"):
            store.write_json(f"s/snapshot_dt={label}/_s{digest}/part-00000.parquet", "rows")
    t0 = datetime.fromisoformat("2026-11-22T10:00:00+00:00")
    keep = {"s/snapshot_dt=a/_s000000000002", "s/snapshot_dt=b/_s000000000002"}

    def clean(label: str, now: datetime) -> list[str]:
        return collect_unreferenced(
            store,
            record,
            scope=f"s/snapshot_dt={label}",
            current=keep,
            now=now,
            retention=timedelta(hours=1),
            owner="s",
            wall=now,
        )

    assert clean("a", t0) == [] and clean("b", t0) == []
    assert set((read_json(record) or {})["replaced"]) == {
        "s/snapshot_dt=a/_s000000000001",
        "s/snapshot_dt=b/_s000000000001",
    }
    later = t0 + timedelta(hours=2)
    assert clean("b", later) == ["s/snapshot_dt=b/_s000000000001"]
    assert clean("a", later) == ["s/snapshot_dt=a/_s000000000001"]
    assert not store.all_files("s/snapshot_dt=a/_s000000000001")


def test_an_outage_does_not_collect_a_version_readers_listed_seconds_ago(tmp_path: Path) -> None:
    """One run after a day's outage moves processing time by a day at once: a directory first
    seen unreferenced just now (wall clock) stays for the retention of real time."""

    store = Store.of(str(tmp_path / "wh"))
    store.write_json("t/dt=2026-11-22/hr=10/_v0001-b0000000004/part-00000.parquet", "rows")
    record = Location(tmp_path / "state" / "replaced.json")
    t0 = wall("2026-11-22T10:00:00+00:00")

    def collect(processing: datetime, real: datetime) -> list[str]:
        return collect_unreferenced(
            store, record, scope="t", current=set(), now=processing,
            retention=timedelta(hours=1), owner="t", wall=real,
        )  # fmt: skip

    assert collect(t0, t0) == []
    assert collect(t0 + timedelta(hours=25), t0 + timedelta(minutes=1)) == []  # processing jumped
    assert collect(t0 + timedelta(hours=26), t0 + timedelta(hours=1)) == [
        "t/dt=2026-11-22/hr=10/_v0001-b0000000004"
    ]


def test_a_directory_a_live_lease_writes_is_neither_emptied_nor_collected(tmp_path: Path) -> None:
    """A rebuild and an amend name the same next version: the second writer refuses instead of
    emptying the first one's directory; the collector leaves it alone while its owner lives;
    a dead owner's leftovers are claimed by the next writer."""

    store = Store.of(str(tmp_path / "wh"))
    directory = "t/dt=2026-11-22/hr=10/_v0002-b0000000004"
    rebuild = TableLock(tmp_path / "state", "t", "rebuild-2026-11-22T10").acquire("rebuild-1")
    claim_version(store, directory, rebuild)
    store.write_json(f"{directory}/part-00000.parquet", "the rebuild's rows")
    amend = TableLock(tmp_path / "state", "t").acquire("seal-7")
    with pytest.raises(VersionConflictError, match="being written by run rebuild-1"):
        claim_version(store, directory, amend)
    assert store.read_json(f"{directory}/part-00000.parquet") == "the rebuild's rows"
    t0 = wall("2026-11-22T10:00:00+00:00")
    record = Location(tmp_path / "state" / "replaced.json")
    kept = collect_unreferenced(
        store, record, scope="t", current=set(), now=t0 + timedelta(days=9),
        retention=timedelta(0), owner="t", wall=t0 + timedelta(days=9),
    )  # fmt: skip
    assert kept == [] and store.read_json(f"{directory}/part-00000.parquet")
    rebuild.release()  # its owner ended (a crash alike): its Spark tasks may still be writing
    mine = claim_version(store, directory, amend)
    assert mine.startswith(f"{directory}-") and mine != directory  # a directory of its own
    assert store.read_json(f"{directory}/part-00000.parquet") == "the rebuild's rows"  # untouched
    assert store.read_json(f"{mine}/{OWNER_RECORD}")["run_id"] == "seal-7"
    assert claim_version(store, directory, amend) == mine  # the same lease finds it again
    assert version_dirs([f"{mine}/part-00000.parquet"]) == {mine}  # the collector sees it


def test_a_retry_reuses_a_whole_version_under_a_taken_over_name_never_a_half_deleted_one(
    tmp_path: Path,
) -> None:
    """A writer that took over from a dead one wrote ``<name>-<owner>``: a later retry reuses it
    (the journal entry's files name it); a marker whose files are gone is not a version."""

    store = Store.of(str(tmp_path / "wh"))
    directory = "t/dt=2026-11-22/hr=10/_v0002-b0000000004"
    dead = TableLock(tmp_path / "state", "t", "rebuild-2026-11-22T10").acquire("rebuild-0")
    claim_version(store, directory, dead)
    store.write_json(f"{directory}/part-00000.parquet", "half of a dead writer's rows")
    dead.release()
    lock = TableLock(tmp_path / "state", "t")
    first = lock.acquire("seal-1")

    def write(into: str) -> list[tuple[str, int]]:
        store.write_json(f"{into}/part-00000.parquet", "rows")
        return [(f"{into}/part-00000.parquet", 3)]

    written = write_version_once(store, directory, write, first)
    assert written.directory.startswith(f"{directory}-") and not written.reused
    first.release()
    second = lock.acquire("seal-1")
    again = write_version_once(store, directory, write, second)
    second.release()
    assert (again.reused, again.directory, again.files) == (True, written.directory, written.files)
    entry = JournalEntry(
        seq=0, table="t", hour="2026-11-22T10", hour_start="", hour_end="", kind=EntryKind.AMEND,
        version=2, rows=3, late=0, files=tuple(written.files), sealed_at="", run_id="seal-1",
        ready_time=None, processing_time="", folded_through_batch=4,
    )  # fmt: skip
    assert entry_directory(None, "dt=2026-11-22/hr=10", entry) == written.directory  # type: ignore[arg-type]
    store.delete(written.files[0])  # the collector deleted its files under a paused writer
    calls: list[str] = []

    def rewrite(into: str) -> list[tuple[str, int]]:
        calls.append(into)
        return write(into)

    third = write_version_once(store, directory, rewrite, lock.acquire("seal-2"))
    assert calls and not third.reused and third.directory not in (directory, written.directory)
