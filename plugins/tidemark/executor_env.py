"""The venv the executors of a cluster run (``TIDEMARK_EXECUTOR_ENV``): unpacked once per
node and archive, never by the driver.

Shipped as ``spark.archives``, the archive was unpacked by every application twice over: by
the driver (Spark extracts archives on the driver too; the driver runs its own venv and never
used it), and by each executor in its working directory (~6 s each for the 209 MB venv on
this machine), job after job. Instead each job ships two files (``spark.files``; the driver
only serves them): the archive, under a name Spark does not untar, and ``tidemark-python``,
the executors' interpreter: a launcher that unpacks the archive into a node-wide cache
(``TIDEMARK_EXECUTOR_ENV_CACHE`` on the node, default ``${TMPDIR:-/tmp}/tidemark-executor-env``)
the first time that node sees that archive, then execs its Python. Later executors and later
applications on the node find it unpacked (the cache entry is named by the archive's content,
so a new archive is a new entry). Two executors missing at once both unpack, and one rename
wins; a reader never sees a half-unpacked venv.

On the driver, the same relative interpreter path (``spark.pyspark.python``, which the driver
uses for the Python data sources' planning) is a launcher that execs the driver's own venv.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
from pathlib import Path

from tidemark.settings import EXECUTOR_PYTHON, Settings

LAUNCHER = EXECUTOR_PYTHON.removeprefix("./")
CACHE_ENV = "TIDEMARK_EXECUTOR_ENV_CACHE"

_EXECUTOR_LAUNCHER = r"""#!/bin/sh
# tidemark: the executors' Python, from the venv archive {pack} shipped beside this script,
# unpacked once per node and archive into ${cache_env} (default: $XDG_CACHE_HOME, else
# $HOME/.cache, then tidemark-executor-env: not /tmp, which cleaners empty under a running
# venv). A copy is whole when it carries its stamp (written after the last file): one without
# (a cleaner took files from it) is unpacked again; half-unpacked copies of killed executors
# older than an hour are swept.
set -e
here=$(cd "$(dirname "$0")" && pwd)
base="${{XDG_CACHE_HOME:-${{HOME:-${{TMPDIR:-/tmp}}}}/.cache}}"
cache="${{{cache_env}:-$base/tidemark-executor-env}}"
env="$cache/{key}"
stamp="$env/.tidemark-complete"
if [ ! -f "$stamp" ] || [ ! -x "$env/bin/python" ]; then
  mkdir -p "$cache"
  find "$cache" -maxdepth 1 \( -name '*.part.*' -o -name '*.stale.*' \) -mmin +60 -exec rm -rf {{}} + 2>/dev/null || true
  part=$(mktemp -d "$env.part.XXXXXX")
  chmod 755 "$part"
  started=$(date +%s)
  tar -xzf "$here/{pack}" -C "$part"
  touch "$part/.tidemark-complete"
  if [ -d "$env" ] && [ ! -f "$stamp" ]; then  # an incomplete copy: set aside, swept later
    mv -T "$env" "$env.stale.$$" 2>/dev/null || true
  fi
  if mv -T "$part" "$env" 2>/dev/null; then
    echo "tidemark: unpacked the executor venv {key} into $env in $(( $(date +%s) - started )) s" >&2
  else
    rm -rf "$part"  # another executor of this node unpacked it first
  fi
fi
exec "$env/bin/python" "$@"
"""

_DRIVER_LAUNCHER = """#!/bin/sh
# tidemark: on the driver, the executors' interpreter path runs the driver's own venv.
exec {python} "$@"
"""


def archive_key(archive: Path) -> str:
    """The archive's content hash (16 hex digits), remembered beside it with the archive's
    size, modification time (ns) and inode: an archive replaced by another, even one with an
    older modification time (``cp -p``, ``rsync -a``, a release tarball), is hashed again
    (hashing 67 MB takes a fraction of a second, once per archive)."""
    sidecar = archive.with_name(archive.name + ".sha256")
    stat = archive.stat()
    identity = f"{stat.st_size} {stat.st_mtime_ns} {stat.st_ino}"
    try:
        key, _, remembered = sidecar.read_text().strip().partition(" ")
        if remembered == identity and len(key) == 64:
            return key[:16]
    except OSError:
        pass
    digest = hashlib.sha256()
    with archive.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    key = digest.hexdigest()
    with contextlib.suppress(OSError):  # a read-only archive directory: hashed again next time
        _write_if_changed(sidecar, f"{key} {identity}\n", mode=0o644)
    return key[:16]


def shipped_files(settings: Settings) -> list[str]:
    """The files a job ships for its executors' Python: the launcher and the archive as
    ``tidemark-env-<key>.pack``, a hard link (or a copy) under a name Spark neither unpacks
    (it untars a fetched ``.tar.gz`` file) nor replaces by its target's (as it does a symbolic
    link's)."""
    archive = Path(settings.executor_env).resolve()
    key = archive_key(archive)
    pack = f"tidemark-env-{key}.pack"
    folder = settings.run_dir / "executor-env" / key
    folder.mkdir(parents=True, exist_ok=True)
    launcher = folder / LAUNCHER
    _write_if_changed(launcher, _EXECUTOR_LAUNCHER.format(key=key, pack=pack, cache_env=CACHE_ENV))
    copy = folder / pack
    if not copy.is_file() or copy.stat().st_size != archive.stat().st_size:
        aside = folder / f".{pack}.{os.getpid()}"
        aside.unlink(missing_ok=True)
        try:
            os.link(archive, aside)
        except OSError:  # another filesystem: a copy, once per archive
            shutil.copyfile(archive, aside)
        aside.replace(copy)
    return [str(launcher), str(copy)]


def driver_launcher(settings: Settings, directory: Path | None = None) -> Path:
    """``./tidemark-python`` in the driver's working directory: the driver's own venv."""
    launcher = (directory or Path.cwd()) / LAUNCHER
    if launcher.is_dir():
        raise RuntimeError(f"{launcher} is a directory: run the job from another directory")
    _write_if_changed(launcher, _DRIVER_LAUNCHER.format(python=shlex.quote(settings.python)))
    return launcher


def _write_if_changed(path: Path, text: str, *, mode: int = 0o755) -> None:
    """Write ``path`` whole (aside, then a rename: drivers in one directory may race)."""
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    aside.write_text(text)
    aside.chmod(mode)
    aside.replace(path)
