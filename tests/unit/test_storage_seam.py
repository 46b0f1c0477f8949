"""The storage seam's two stores (``hourcommit/base.HourVersions``), step by step on the
local disk with tiny files: what a draft is, what completing and revealing it does, and
what a retry finds. The seal drives the same calls with Spark's writes (the integration
and e2e tests); here the writer is a few bytes, so each store's rules are seen alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tidemark.errors import LeaseLostError, RebuildError, VersionConflictError
from tidemark.hourcommit.base import Draft, PublishedHour, Writer, Written
from tidemark.hourcommit.renaming import RenamingVersions
from tidemark.hourcommit.versioned import OwnDirectoryVersions
from tidemark.settings import Settings
from tidemark.state.layout import COMPACTED_MARKER, Layout
from tidemark.state.locks import TableLock
from tidemark.time.hours import parse_key

pytestmark = pytest.mark.unit

HOUR = parse_key("2026-11-22T10", "UTC")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return replace(
        Settings.from_env({"TIDEMARK_HOME": str(tmp_path / "home")}), state_uri=str(tmp_path / "state")
    )


@pytest.fixture
def layout(settings: Settings) -> Layout:
    return Layout(settings, "t")


def write(layout: Layout, draft: Draft, *names: str) -> Written:
    """What a writer puts in a draft: one row per file, named ``<prefix>-NNNNN.parquet``."""
    written = []
    for i, name in enumerate(names):
        path = draft.directory / name / f"{draft.prefix}-{i:05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"row")
        written.append((layout.relative(path), 1))
    return written


def test_a_renamed_compaction_enters_the_hidden_hour_and_a_retry_reuses_it(layout: Layout) -> None:
    versions, writer = RenamingVersions(layout), Writer("seal-1")
    draft = versions.draft(HOUR, "compact", version=1, through=3, writer=writer, rows=2)
    assert draft.done is None and draft.replaces is None
    assert layout.staging_root in draft.directory.parents  # the writer's own scratch
    files, home = versions.complete(draft, write(layout, draft, "", ""), writer)
    assert home == layout.sealing_dir / HOUR.path  # hidden until the gate passes
    assert all(f.startswith(layout.relative(layout.table_dir / HOUR.path)) for f in files)  # readers' names

    again = versions.draft(HOUR, "compact", version=1, through=3, writer=writer, rows=2)
    assert again.done is not None and again.done.files == files and again.directory == home
    target, atomic = versions.reveal(HOUR, home, version=1, writer=writer)
    assert target == layout.table_dir / HOUR.path and atomic
    assert sorted(layout.relative(p) for p in target.rglob("*.parquet")) == sorted(files)
    assert versions.where(PublishedHour(HOUR.path, 1, 3)) == target


def test_a_stale_renamed_compaction_is_written_again_and_exchanged_whole(layout: Layout) -> None:
    """A marker with other rows than the commit log's: a seal failed before its journal
    entry and batches committed since; the hour is compacted again and swapped in whole."""
    versions, writer = RenamingVersions(layout), Writer("seal-1")
    first = versions.draft(HOUR, "compact", version=1, through=3, writer=writer, rows=1)
    _, home = versions.complete(first, write(layout, first, ""), writer)
    stale = versions.draft(HOUR, "compact", version=1, through=4, writer=writer, rows=3)
    assert stale.done is None and stale.replaces == home
    files, again = versions.complete(stale, write(layout, stale, "", "", ""), writer)
    assert again == home and len(files) == 3
    assert len(list(home.glob("*.parquet"))) == 3  # the new version only, never a mix


def test_a_renamed_amend_moves_its_files_in_beside_the_hours(layout: Layout) -> None:
    versions, writer = RenamingVersions(layout), Writer("seal-1")
    sealed = layout.table_dir / HOUR.path
    sealed.mkdir(parents=True)
    (sealed / "part-v0001-00000.parquet").write_bytes(b"row")
    draft = versions.draft(HOUR, "amend", version=2, through=5, writer=writer)
    assert draft.appends and draft.named_under == sealed and draft.prefix.endswith("2")
    files, target = versions.complete(draft, write(layout, draft, ""), writer)
    assert target == sealed and not draft.directory.exists()
    assert sorted(p.name for p in sealed.glob("*.parquet")) == [
        "part-v0001-00000.parquet",
        Path(files[0]).name,
    ]


def test_a_renaming_claim_is_a_live_leases_and_a_second_enter_is_refused(
    layout: Layout, settings: Settings
) -> None:
    """The local disk's fence: a seal that had its scratch before its successor never enters
    the hidden hour the successor compacted, and a writer past its lease claims nothing."""
    versions = RenamingVersions(layout)
    first, second = Writer("seal-1"), Writer("seal-2")
    paused = versions.draft(HOUR, "compact", version=1, through=3, writer=first, rows=1)
    written = write(layout, paused, "")
    successor = versions.draft(HOUR, "compact", version=1, through=3, writer=second, rows=1)
    versions.complete(successor, write(layout, successor, ""), second)
    with pytest.raises(VersionConflictError, match="written by another seal meanwhile"):
        versions.complete(paused, written, first)
    assert len(list((layout.sealing_dir / HOUR.path).glob("*.parquet"))) == 1  # the successor's

    lease = TableLock(settings.state_location, "t").acquire("seal-3")
    lease.release()
    with pytest.raises(LeaseLostError):
        versions.draft(HOUR, "compact", version=1, through=3, writer=Writer("seal-3", lease), rows=9)


def test_an_own_directory_version_is_written_once_and_reused_by_a_retry(layout: Layout) -> None:
    versions, writer = OwnDirectoryVersions(layout), Writer("seal-1")
    draft = versions.draft(HOUR, "compact", version=1, through=3, writer=writer)
    assert draft.directory == layout.hour_version(HOUR.path, 1, 3) == draft.named_under
    files, home = versions.complete(draft, write(layout, draft, "app=web", "app=ios"), writer)
    assert home == draft.directory and (home / COMPACTED_MARKER).exists()
    again = versions.draft(HOUR, "compact", version=1, through=3, writer=writer)
    assert again.done is not None and again.done.files == files and again.done.rows == 2
    assert versions.reveal(HOUR, home, version=1, writer=writer) == (home, True)  # nothing moves
    entry = PublishedHour(HOUR.path, 1, 3, directory="", published=False)
    assert versions.where(entry) == home  # a quarantined version is only unregistered


def test_an_own_directory_reveal_refuses_another_version_or_a_directory_not_whole(layout: Layout) -> None:
    """A step paused while the hour moved on never points it back, and a directory whose
    files were deleted under it is never pointed at."""
    versions, writer = OwnDirectoryVersions(layout), Writer("rebuild-1")
    draft = versions.draft(HOUR, "rebuild", version=2, through=3, writer=writer)
    with pytest.raises(RebuildError, match="no marker"):
        versions.reveal(HOUR, draft.directory, version=2, writer=writer)
    files, home = versions.complete(draft, write(layout, draft, ""), writer)
    with pytest.raises(RebuildError, match="not its next version"):
        versions.reveal(HOUR, home, version=3, writer=writer)
    (layout.warehouse / files[0]).unlink()
    with pytest.raises(RebuildError, match="1 files missing"):
        versions.reveal(HOUR, home, version=2, writer=writer)
