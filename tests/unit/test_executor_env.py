"""The executors' launcher of the shipped venv: it unpacks the archive once per node cache
and archive (two executors at once included), then runs its Python with the arguments it
was given; the driver ships it and the archive as plain files and never unpacks anything."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tidemark.executor_env import LAUNCHER, archive_key, driver_launcher, shipped_files
from tidemark.settings import Settings
from tidemark.spark import session_conf

pytestmark = pytest.mark.unit


def venv_archive(path: Path, marker: str) -> Path:
    """A stand-in venv archive: ``bin/python`` prints its marker and arguments."""
    script = f'#!/bin/sh\necho "{marker} $*"\n'.encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("./bin/python")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
    return path


def settings_for(tmp_path: Path, archive: Path) -> Settings:
    return Settings.from_env(
        {
            "TIDEMARK_HOME": str(tmp_path / "home"),
            "TIDEMARK_SPARK_MASTER": "spark://127.0.0.1:7077",
            "TIDEMARK_EXECUTOR_ENV": str(archive),
        }
    )


def executor_dir(tmp_path: Path, shipped: list[str], name: str) -> Path:
    """An executor's working directory: the shipped files, copied as Spark fetches them."""
    work = tmp_path / name
    work.mkdir()
    for file in map(Path, shipped):
        (work / file.name).write_bytes(file.read_bytes())
        (work / file.name).chmod(0o755)
    return work


def launch(work: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [f"./{LAUNCHER}", *args],
        cwd=work,
        env={"PATH": "/usr/bin:/bin", "TIDEMARK_EXECUTOR_ENV_CACHE": str(cache)},
        capture_output=True,
        text=True,
        check=True,
    )


def test_each_node_unpacks_an_archive_once_and_executors_run_its_python(tmp_path: Path) -> None:
    archive = venv_archive(tmp_path / "env.tar.gz", "v1")
    settings = settings_for(tmp_path, archive)
    shipped = shipped_files(settings)
    assert [Path(f).name for f in shipped] == [LAUNCHER, f"tidemark-env-{archive_key(archive)}.pack"]
    assert not Path(shipped[1]).is_symlink()  # Spark would serve a link under its target's name
    cache = tmp_path / "node-cache"
    first = launch(executor_dir(tmp_path, shipped, "app-1-exec-0"), cache, "-m", "pyspark.daemon")
    assert first.stdout == "v1 -m pyspark.daemon\n"
    assert "unpacked the executor venv" in first.stderr
    again = launch(executor_dir(tmp_path, shipped, "app-2-exec-0"), cache, "-c", "x")
    assert again.stdout == "v1 -c x\n" and again.stderr == ""  # the next application: no unpack
    assert [p.name for p in cache.iterdir()] == [archive_key(archive)]

    # a new archive is a new cache entry, beside the old one
    newer = venv_archive(tmp_path / "env.tar.gz", "v2")
    shipped = shipped_files(settings_for(tmp_path, newer))
    assert launch(executor_dir(tmp_path, shipped, "app-3-exec-0"), cache).stdout == "v2 \n"
    assert len(list(cache.iterdir())) == 2


def test_two_executors_missing_at_once_both_run_and_one_unpacked_copy_stays(tmp_path: Path) -> None:
    archive = venv_archive(tmp_path / "env.tar.gz", "v1")
    shipped = shipped_files(settings_for(tmp_path, archive))
    cache = tmp_path / "node-cache"
    works = [executor_dir(tmp_path, shipped, f"exec-{i}") for i in range(4)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda w: launch(w, cache, "go"), works))
    assert [r.stdout for r in results] == ["v1 go\n"] * 4
    assert [p.name for p in cache.iterdir()] == [archive_key(archive)]  # no half-unpacked leftovers


def test_a_copy_a_cleaner_emptied_is_unpacked_again_and_stale_halves_are_swept(tmp_path: Path) -> None:
    """/tmp cleaners delete files under a live venv; killed executors leave half-unpacked
    directories: neither is run, and the halves older than an hour go."""

    archive = venv_archive(tmp_path / "env.tar.gz", "v1")
    key = archive_key(archive)
    shipped = shipped_files(settings_for(tmp_path, archive))
    cache = tmp_path / "node-cache"
    launch(executor_dir(tmp_path, shipped, "exec-0"), cache, "first")
    (cache / key / ".tidemark-complete").unlink()  # a cleaner took the stamp (and maybe more)
    old = cache / f"{key}.part.abc123"  # a killed executor's half, two hours old
    old.mkdir()
    hours_ago = time.time() - 7200
    os.utime(old, (hours_ago, hours_ago))
    fresh = cache / f"{key}.part.def456"  # one being unpacked right now: kept
    fresh.mkdir()
    again = launch(executor_dir(tmp_path, shipped, "exec-1"), cache, "again")
    assert again.stdout == "v1 again\n" and "unpacked the executor venv" in again.stderr
    assert (cache / key / ".tidemark-complete").is_file()
    assert not old.exists() and fresh.exists()


def test_the_default_cache_is_not_tmp(tmp_path: Path) -> None:
    archive = venv_archive(tmp_path / "env.tar.gz", "v1")
    shipped = shipped_files(settings_for(tmp_path, archive))
    work = executor_dir(tmp_path, shipped, "exec-0")
    home = tmp_path / "worker-home"
    home.mkdir()
    ran = subprocess.run(
        [f"./{LAUNCHER}", "x"],
        cwd=work,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout == "v1 x\n"
    assert (home / ".cache" / "tidemark-executor-env" / archive_key(archive) / "bin" / "python").is_file()


def test_the_driver_ships_files_and_runs_its_own_venv_under_the_executor_path(tmp_path: Path) -> None:
    archive = venv_archive(tmp_path / "env.tar.gz", "v1")
    settings = settings_for(tmp_path, archive)
    conf = session_conf(settings)
    assert "spark.archives" not in conf  # nothing for the driver to unpack
    assert conf["spark.files"] == ",".join(shipped_files(settings))
    assert conf["spark.executorEnv.PYSPARK_PYTHON"] == conf["spark.pyspark.python"] == f"./{LAUNCHER}"
    launcher = driver_launcher(settings, tmp_path)
    ran = subprocess.run(
        [str(launcher), "-c", "import sys; print(sys.prefix)"], check=False, capture_output=True, text=True
    )
    assert ran.returncode == 0 and ran.stdout.strip() == str(Path(settings.python).parent.parent)


def test_the_archive_hash_is_remembered_until_the_archive_changes(tmp_path: Path) -> None:
    archive = venv_archive(tmp_path / "env.tar.gz", "v1")
    key = archive_key(archive)
    sidecar = tmp_path / "env.tar.gz.sha256"
    assert sidecar.read_text().startswith(key)
    remembered = sidecar.read_text().split(" ", 1)[1]
    sidecar.write_text("0" * 64 + " " + remembered)  # remembered: not hashed again for the same file
    assert archive_key(archive) == "0" * 16
    venv_archive(archive, "v2")
    assert archive_key(archive) not in ("0" * 16, key)


def test_an_archive_replaced_by_an_older_one_is_hashed_again(tmp_path: Path) -> None:
    """``cp -p`` / ``rsync -a`` / a release tarball: the new archive's mtime is older than the
    sidecar's; a key kept by mtime alone would ship the old venv's key with the new content."""

    archive = venv_archive(tmp_path / "env.tar.gz", "v1")
    old = archive_key(archive)
    (tmp_path / "other").mkdir()
    other = venv_archive(tmp_path / "other" / "env.tar.gz", "v2")
    os.utime(other, ns=(1_000_000_000, 1_000_000_000))  # an old release
    shutil.copy2(other, archive)  # cp -p: content and the old mtime
    assert archive_key(archive) != old
