"""Table files through ``pyarrow.fs``: one way to open, list, write and read the files of a
warehouse on local disk, HDFS or S3 (``Store``); Spark reads and writes them through
``tidemark.sparkfiles``.

The pyspark wheel has no hadoop-aws, so Spark cannot read ``s3a://`` here (the only s3a jars on
the registries are hadoop-aws 3.3.1 with AWS SDK v1, a version mix Hadoop does not support).
tidemark's own jobs therefore read table files through this data source: each Spark task opens
its files with pyarrow's S3 (or local, or HDFS) filesystem and hands Arrow record batches to
Spark. A user's Spark reading the tables through the metastore uses its own matching
hadoop-aws, as in any production deployment; docs/benchmarks.md has the figures behind the
choice (``bench/s3_read.py``).

S3 endpoint and credentials come from the driver's usual ``AWS_*`` environment
(``AWS_ENDPOINT_URL`` for a non-AWS store) and reach the executors in a ``secret.``-named
option, which Spark redacts from plans and the UI (as the Kafka source's client settings).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from tidemark.tableformat import DATA_SUFFIXES, TableFormat, file_rows, is_data_file

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

log = logging.getLogger(__name__)

OBJECT_STORE_SCHEMES = ("s3", "s3a")


def is_object_store(uri: str) -> bool:
    """Whether ``uri`` is on an object store (no rename: files are written once, in place)."""
    return urlparse(uri).scheme in OBJECT_STORE_SCHEMES


def spark_reads(uri: str) -> bool:
    """Whether Spark's own Hadoop filesystems read files at ``uri`` here (local disk, HDFS:
    yes; S3: no s3a on the executors, tidemark's pyarrow data source reads them)."""
    return not is_object_store(uri)


def hadoop_create_is_exclusive(uri: str) -> bool:
    """Whether two writers creating one file at ``uri`` through Hadoop's plain ``create``
    cannot both succeed: local disk and HDFS, yes; s3a, no (only its ``createFile()`` builder
    makes a conditional PUT: what tidemark's Delta log store for S3 uses)."""
    return not is_object_store(uri)


def needs_s3a(uri: str) -> bool:
    """Whether the Hive client registers this warehouse's locations as ``s3a://``
    (``hadoop_uri``): its session then needs hadoop-aws on the class path and the s3a
    settings, whoever reads the files."""
    return hadoop_uri(uri).startswith("s3a://")


def storage_kind(uri: str) -> str:
    """``object_store`` (no rename: a file is written once where it stays) or ``filesystem``
    (local disk, HDFS: staged files are renamed into place). The commit protocols
    (``tidemark.hourcommit``, the batch publisher, the snapshot store) pick their
    implementation by it, once per table."""
    return "object_store" if is_object_store(uri) else "filesystem"


def local_path(location: str) -> str:
    """A ``file:`` location as the path it names (the metastore gives local directories as
    ``file:/path``, Iceberg's Java library ``file:/path``, pyiceberg ``file:///path``); any
    other location as it is."""
    if location.startswith("file:"):
        return "/" + location.removeprefix("file:").lstrip("/")
    return location


def hadoop_uri(uri: str) -> str:
    """The URI Hive and Spark's Hadoop filesystems know the location by (``s3://`` is ``s3a://``
    there; the metastore needs a FileSystem class for every registered location)."""
    return "s3a://" + uri[len("s3://") :] if uri.startswith("s3://") else uri


def s3_from_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The S3 settings of the ``AWS_*`` environment (endpoint, region, keys), for executors
    whose environment the driver's does not reach (a cluster's, or a Spark started before
    them); empty values left out, so instance roles keep working."""
    env = dict(os.environ if env is None else env)
    keys = {
        "endpoint": "AWS_ENDPOINT_URL",
        "region": "AWS_REGION",
        "access_key": "AWS_ACCESS_KEY_ID",
        "secret_key": "AWS_SECRET_ACCESS_KEY",
        "session_token": "AWS_SESSION_TOKEN",
    }
    return {name: env[var] for name, var in keys.items() if env.get(var)}


def filesystem(uri: str, s3: dict[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) for a local path, ``file://``, ``hdfs://``,
    ``s3://`` or ``s3a://`` URI; S3 settings from ``s3`` (see :func:`s3_from_environment`),
    else from this process's environment."""
    import pyarrow.fs as pafs

    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a"):
        conf = s3_from_environment() if s3 is None else s3
        options: dict[str, Any] = {"region": conf.get("region", "us-east-1")}
        if conf.get("endpoint"):
            ep = urlparse(conf["endpoint"])
            options.update(endpoint_override=ep.netloc or conf["endpoint"], scheme=ep.scheme or "https")
        if conf.get("access_key"):
            options.update(
                access_key=conf["access_key"],
                secret_key=conf.get("secret_key", ""),
                session_token=conf.get("session_token"),
            )
        return pafs.S3FileSystem(**options), f"{parsed.netloc}{parsed.path}"
    if parsed.scheme in ("", "file"):
        return pafs.LocalFileSystem(), parsed.path if parsed.scheme else uri
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path


def parquet_files(uri: str) -> list[str]:
    """The visible data files (Parquet, ORC) under ``uri`` (recursively; ``_``/``.`` parts are hidden, as
    for Hive and Spark), as URIs of the same scheme, sorted."""
    store = Store.of(uri)
    return [store.uri(f) for f in store.files("")]


@dataclass(frozen=True)
class Store:
    """A warehouse root on one pyarrow filesystem, addressed by warehouse-relative paths.

    Picklable (the root URI and the S3 settings, never a live client), so a Spark task gets
    the driver's store and opens its own filesystem. Writes are whole-file: a local file is
    written aside and renamed into place, an object is one PUT (atomic for readers)."""

    root: str
    s3: dict[str, str] = field(default_factory=dict, repr=False)  # secrets: never in repr/logs

    @classmethod
    def of(cls, root: str) -> Store:
        return cls(root.rstrip("/"), s3_from_environment() if is_object_store(root) else {})

    @property
    def object_store(self) -> bool:
        return is_object_store(self.root)

    @property
    def spark_reads(self) -> bool:
        """Whether Spark's own Hadoop filesystems read this store here (``spark_reads``)."""
        return spark_reads(self.root)

    def make_parent(self, path: str) -> None:
        """Create the directory a file at ``path`` (a filesystem path) goes into, where
        directories exist (an object store has none)."""
        if not self.object_store:
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)

    def make_dir(self, relative: str) -> None:
        """Create a directory (warehouse-relative) where directories exist (a metastore checks
        that a local table's location does; an object store has none)."""
        if not self.object_store:
            self.fs.create_dir(self.path(relative), recursive=True)

    def metastore_location(self, relative: str, local: str) -> str:
        """A warehouse path as the metastore registers it: ``s3a://`` on S3 (Hive knows s3 by
        the s3a FileSystem), the local path (``local``) elsewhere."""
        return hadoop_uri(self.uri(relative)) if self.object_store else local

    @cached_property
    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return filesystem(self.root, self.s3)

    @property
    def fs(self) -> pafs.FileSystem:
        return self._fs[0]

    def path(self, relative: str) -> str:
        """The filesystem path of a warehouse-relative path."""
        base = self._fs[1].rstrip("/")
        return f"{base}/{relative}" if relative else base

    def uri(self, relative: str) -> str:
        return f"{self.root}/{relative}" if relative else self.root

    def exists(self, relative: str) -> bool:
        import pyarrow.fs as pafs

        return bool(self.fs.get_file_info(self.path(relative)).type != pafs.FileType.NotFound)

    def all_files(self, relative: str) -> list[str]:
        """Every file under a directory, hidden ones included, warehouse-relative, sorted."""
        return sorted(self.file_sizes(relative))

    def file_sizes(self, relative: str) -> dict[str, int]:
        """Every file under a directory, hidden ones included: warehouse-relative path -> bytes
        (one recursive listing: on S3 a request per thousand objects, not one per file)."""
        import pyarrow.fs as pafs

        base = self.path("")
        infos = self.fs.get_file_info(
            pafs.FileSelector(self.path(relative), recursive=True, allow_not_found=True)
        )
        return {i.path[len(base) :].lstrip("/"): i.size or 0 for i in infos if i.type == pafs.FileType.File}

    def children(self, relative: str) -> list[str]:
        """The names of the directories right under one, sorted: one delimited listing on S3,
        not every object below (a Delta table's data files, every version's)."""
        import pyarrow.fs as pafs

        infos = self.fs.get_file_info(pafs.FileSelector(self.path(relative), allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def files(self, relative: str, suffix: str | tuple[str, ...] = DATA_SUFFIXES) -> list[str]:
        """Files under a directory (recursively; hidden ``_``/``.`` names below it skipped), as
        sorted warehouse-relative paths; data files (Parquet, ORC) unless ``suffix`` says."""
        import pyarrow.fs as pafs

        base = self.path("")
        infos = self.fs.get_file_info(
            pafs.FileSelector(self.path(relative), recursive=True, allow_not_found=True)
        )
        found = []
        for info in infos:
            if info.type != pafs.FileType.File or not info.path.endswith(suffix):
                continue
            below = info.path[len(self.path(relative)) :].lstrip("/")
            if any(part.startswith(("_", ".")) for part in below.split("/")):
                continue
            found.append(info.path[len(base) :].lstrip("/"))
        return sorted(found)

    def write_table(self, relative: str, table: pa.Table, fmt: TableFormat | None = None) -> None:
        """``table`` as one file: in ``fmt``, else pyarrow's default Parquet."""
        if fmt is not None:
            self._write(relative, lambda out: fmt.write_whole(out, table))
            return
        import pyarrow.parquet as pq

        self._write(relative, lambda out: pq.write_table(table, out))

    def link(self, source: str, target: str) -> None:
        """``target`` made the very file ``source`` is, without rewriting it: a hard link on a
        local filesystem, else :meth:`copy` (a server-side copy on an object store; a copy across
        devices). Both warehouse-relative; whatever a crashed attempt left at ``target`` is
        replaced. A reader listing ``target``'s directory sees it whole or not at all: the
        link or copy is made under a hidden name, then renamed."""
        import pyarrow.fs as pafs

        if not isinstance(self.fs, pafs.LocalFileSystem):
            self.copy(source, target)
            return
        target_path = self.path(target)
        self.make_parent(target_path)
        directory, name = target_path.rsplit("/", 1)
        aside = f"{directory}/.{name}.{uuid.uuid4().hex}.tmp"  # hidden: no reader lists it
        try:
            os.link(self.path(source), aside)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
            self.fs.copy_file(self.path(source), aside)
        os.replace(aside, target_path)

    def write_json(self, relative: str, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self._write(relative, lambda out: out.write(data))

    def _write(self, relative: str, write: Any) -> None:
        target = self.path(relative)
        if self.object_store:
            with self.fs.open_output_stream(target) as out:
                write(out)
            return
        self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        aside = f"{target}.{uuid.uuid4().hex}.tmp"  # attempts may overlap
        with self.fs.open_output_stream(aside) as out:
            write(out)
        self.fs.move(aside, target)

    def read_json(self, relative: str) -> Any:
        try:
            with self.fs.open_input_stream(self.path(relative)) as handle:
                return json.loads(handle.read())
        except FileNotFoundError:
            return None

    def size(self, relative: str) -> int:
        return int(self.fs.get_file_info(self.path(relative)).size or 0)

    def rows(self, relative: str) -> int:
        """Rows in a data file (Parquet or ORC, by its suffix), from its footer."""
        with self.fs.open_input_file(self.path(relative)) as handle:
            return file_rows(handle, "." + relative.rsplit(".", 1)[-1])

    def copy(self, source: str, target: str) -> None:
        """Copy a file (on S3 a server-side copy: the bytes do not pass through here)."""
        self.make_parent(self.path(target))
        self.fs.copy_file(self.path(source), self.path(target))

    def delete(self, relative: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(relative))

    def delete_dir(self, relative: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(self.path(relative))

    def delete_counted(self, relative: str) -> tuple[int, int]:
        """Delete a directory and everything below it; (files, bytes) it held, (0, 0) for
        one not there (retention's log lines count what they reclaimed)."""
        sizes = self.file_sizes(relative)
        if sizes:
            self.delete_dir(relative)
        return len(sizes), sum(sizes.values())


def delta_storage_options(uri: str) -> dict[str, str]:
    """delta-rs's settings for the table at ``uri``: on S3 the documented ``AWS_*``
    environment (endpoint, region, keys), every commit a conditional PUT (``If-None-Match``,
    never the unsafe rename), plain HTTP allowed only for an ``http://`` endpoint."""
    if not is_object_store(uri):
        return {}
    names = {
        "endpoint": "AWS_ENDPOINT_URL",
        "region": "AWS_REGION",
        "access_key": "AWS_ACCESS_KEY_ID",
        "secret_key": "AWS_SECRET_ACCESS_KEY",
        "session_token": "AWS_SESSION_TOKEN",
    }
    s3 = s3_from_environment()
    options = {names[k]: v for k, v in s3.items()}
    options.update(aws_conditional_put="etag", AWS_S3_ALLOW_UNSAFE_RENAME="false")
    if s3.get("endpoint", "").startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"
    return options


# -- local data directories: an hour's version swapped in one step (the filesystem warehouse) --
def data_files(directory: Path) -> list[Path]:
    """The data files (Parquet, ORC) under a local directory, sorted; none if it is missing."""
    if not directory.exists():
        return []
    return sorted(p for p in directory.rglob("*") if is_data_file(p.name) and p.is_file())


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange_directories(new: Path, current: Path) -> bool:
    """Swap two directories so readers of ``current`` see the old files or the new ones, never
    a mix; ``new`` then holds the old version. Returns whether the swap was atomic.

    Linux ``renameat2(RENAME_EXCHANGE)`` swaps both names in one step. Where the call or the
    filesystem does not support it, two renames leave ``current`` missing for an instant
    (readers see an empty hour, never duplicates) and ``False`` is returned.
    """

    if not current.exists():
        new.rename(current)
        new.mkdir()
        return True
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        rc = renameat2(_AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(current), _RENAME_EXCHANGE)
        if rc == 0:
            return True
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(code, f"renameat2(RENAME_EXCHANGE) {new} <-> {current}: {os.strerror(code)}")
    aside = new.with_name(f"{new.name}.old-{uuid.uuid4().hex[:8]}")
    current.rename(aside)
    new.rename(current)
    aside.rename(new)
    log.warning("swapped %s with two renames (no atomic exchange on this filesystem)", current)
    return False
