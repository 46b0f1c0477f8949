"""Where a table's files live and what they are called: the one module that both builds and
parses every path and file name of the warehouse (secor's ``LogFilePath``, paimon's
``SnapshotManager``), so a storage backend changes one place.

Under the warehouse root::

    <table>/_open/dt=D/hr=H/part-b<batch>-<i>.parquet   committed batch files, not yet sealed
    <table>/_sealing/dt=D/hr=H/part-<i>.parquet         an hour compacted, not yet checked and
                                                        registered (or quarantined): hidden
    <table>/dt=D/hr=H/part-<i>.parquet                  a sealed hour (+ _SUCCESS, the marker)
    <table>/dt=D/hr=H/part-v<version>-<i>.parquet       rows an amend added (version >= 2)
    <table>__late/dt=D/hr=H/part-b<batch>-<i>.parquet   late rows (side_table policy)
    <table>__dirty/batch_id=<batch>/part-<i>.parquet    dirty records with their reasons
    <table>__dirty/_replayed/batch_id=<batch>/          dirty records a replay classified again
                                                        (hidden; kept: rebuilds re-read them)
    .tidemark_staging/<table>/b<batch>/attempt-*/       a dump attempt's staged files
    .tidemark_staging/<table>/<step>-<hour>-<run>/      a seal, amend or rebuild in progress

On an object store (no rename), files are written once where they stay, and a registered
partition changes only by pointing it at a new directory (``versioned_hour``)::

    <table>/_open/dt=D/hr=H/part-b<batch>-p<mq>-<start>.parquet   a read task's file, final
    <table>__late/_open/dt=D/hr=H/part-b<batch>-...               late rows of committed batches
    <table>__dirty/_open/batch_id=<batch>/                        dirty records until the commit
                                                                  record (then copied to
                                                                  batch_id=<batch>/)
    <table>/dt=D/hr=H/_versions/v<version>-b<batch>/part-<i>.parquet  a version of a sealed hour
    <table>__late/dt=D/hr=H/_versions/v<late rows>-b<batch>/          a version of a late partition
    <table>__dirty/_replayed/batch_id=<batch>/                    a replay's input, copied (the
                                                                  visible originals deleted after
                                                                  the replay's commit record)

The leading underscore of ``_open``, ``_versions`` and the dot of ``.tidemark_staging`` hide
them from path-based readers (Hive and Spark skip such names). A version directory itself has a
visible name: Hadoop's ``FileInputFormat`` (Hive, Spark through Hive's SerDes) refuses a
partition location whose own name is hidden ("Input path does not exist"); tables written
before 2026-11-26 have ``_v...`` versions directly in the hour, read by every other reader and
by Hive's once a rebuild or an amend writes a new version.
"""

from __future__ import annotations

import hashlib
import re
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.tablefs import Store, hadoop_uri, local_path, storage_kind

if TYPE_CHECKING:
    from tidemark.settings import Settings

SUCCESS = "_SUCCESS"
COMPACTED_MARKER = "_tidemark_compacted.json"
REPLAYED_MARKER = "_tidemark_replayed.json"  # object stores: a replayed batch's kept input is whole
DATA_DOCS = "data_docs"
STAGING = ".tidemark_staging"
VERSIONS = "_versions"  # hidden parent of an object-store partition's version directories
# _versions/v<version or late rows, 4 digits or more>-b<batch>[-<owner>], _versions/s<digest>;
# older releases: _v..., _s... directly in the partition
_VERSION_DIR = re.compile(
    rf"^(.*/(?:_|{VERSIONS}/)(?:v\d{{4,}}-b\d{{10}}|s[0-9a-f]{{12}})(?:-[0-9a-f]{{8}})?)/"
)
_VERSION_NAME = re.compile(r"^v\d{4,}-b(\d{10})(?:-[0-9a-f]{8})?$")
_BATCH_FILE = re.compile(r"part-b(\d{10})-(?:p\d+-)?\d+(?:-t\d{10})?\.parquet$")
_ATTEMPT_TOKEN = re.compile(r"-t(\d{10})\.parquet$")


def run_key(run_id: str) -> str:
    """A filesystem-safe, collision-free key for an Airflow run id (which holds ':' and '+')."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:80]
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:12]
    return f"{readable}-{digest}"


def table_uri(warehouse: str, table: str) -> str:
    """A table's directory as a URI (``file:///...``, ``s3://bucket/prefix/table``): the
    warehouse setting is a path or a URI, and ``pathlib`` would collapse ``s3://`` into a
    relative path (an Asset URI, lineage, anything that leaves the process)."""
    if "://" in warehouse:
        return f"{warehouse.rstrip('/')}/{table}"
    return (Path(warehouse).expanduser().resolve() / table).as_uri()


def batch_dir_name(batch_id: int) -> str:
    """``b0000000042``: a batch's directory of staged files or of rebuild receipts."""
    return f"b{batch_id:010d}"


def batch_file_name(batch_id: int, index: int) -> str:
    """``part-b0000000042-00003.parquet``: a committed batch file of an hour (open or late)."""
    return f"part-b{batch_id:010d}-{index:05d}.parquet"


def dirty_file_name(index: int) -> str:
    """``part-00003.parquet``: a file of a batch's dirty records (``Layout.dirty_batch_dir``)."""
    return f"part-{index:05d}.parquet"


def batch_task_file_name(batch_id: int, task_file: str) -> str:
    """``part-b0000000042-p3-000000001200.parquet``: a batch file written once by its read task
    under its final name (object stores), named by the task's sub-range."""
    return f"part-b{batch_id:010d}-{task_file}"


def attempt_file_name(task_file: str, token: int | None) -> str:
    """``p3-000000001200-t0000000042.parquet``: a task's file named by the lease token of the
    attempt writing it (object stores), so that an attempt rolls back only its predecessors'
    files (smaller tokens) and never a successor's (fencing tokens only grow)."""
    if token is None:
        return task_file
    return task_file.removesuffix(".parquet") + f"-t{token:010d}.parquet"


def token_of_file(name: str) -> int | None:
    """The lease token of the attempt that wrote a file of :func:`attempt_file_name`."""
    match = _ATTEMPT_TOKEN.search(name)
    return int(match.group(1)) if match else None


def version_dir_of(relative: str) -> str | None:
    """The version directory (``Layout.versioned_hour``, ``Layout.snapshot_version``) a
    warehouse-relative file lies in."""
    match = _VERSION_DIR.match(relative)
    return match.group(1) if match else None


def partition_hour_values(name: str) -> tuple[str, str]:
    """(dt, hr) of a partition name ``dt=.../hr=...[/col=...]``: compared as text, they sort
    in time order (``hr=01b``, the repeated hour of a fall-back day, after ``hr=01``)."""
    dt, hr = (part.partition("=")[2] for part in name.split("/")[:2])
    return dt, hr


def batch_through(version_name: str, default: int) -> int:
    """The last batch a version directory (``v0002-b0000000007``) holds; ``default`` for a
    directory not named so (a renamed hour's)."""
    match = _VERSION_NAME.match(version_name)
    return int(match.group(1)) if match else default


def batch_of_file(name: str) -> int | None:
    """The batch a file of :func:`batch_file_name` came from; None for other files."""
    match = _BATCH_FILE.search(name)
    return int(match.group(1)) if match else None


def sealed_file_prefix(version: int) -> str:
    """``part`` for the files of a seal or rebuild, ``part-v0002`` for those an amend added."""
    return "part" if version <= 1 else f"part-v{version:04d}"


def write_success(store: Store, hour_dir: str, hour_key: str, rows: int, version: int) -> None:
    """Mark an hour directory (warehouse-relative) complete for path-based readers: after
    registration, or with a version that is swapped in whole."""
    store.write_json(f"{hour_dir}/{SUCCESS}", {"hour": hour_key, "rows": rows, "version": version})


def compaction_marker(hour_dir: Path) -> Path:
    """The record of an hour's compacted files and rows (a retry never rewrites them)."""
    return hour_dir / COMPACTED_MARKER


def data_docs_dir(state_dir: Path, table: str) -> Path:
    """Great Expectations Data Docs of a table (beside its state, when that is local)."""
    return state_dir / table / DATA_DOCS


class Layout:
    """The directories of one table under the warehouse (one filesystem: staging renames
    into the table)."""

    def __init__(self, settings: Settings, table: str, *, kind: str | None = None) -> None:
        self.table = table
        self.warehouse_uri = settings.warehouse.rstrip("/")
        # how versions live: "filesystem" (renamed in place) or "object_store" (a directory
        # each); by the warehouse URL unless the table's output.layout chose (Table.open)
        self.kind = kind or storage_kind(self.warehouse_uri)
        self.warehouse = Path(settings.warehouse)
        self.table_dir = self.warehouse / table
        self.open_dir = self.table_dir / "_open"
        self.dirty_dir = self.warehouse / f"{table}__dirty"
        self.late_dir = self.warehouse / f"{table}__late"
        self.staging_root = self.warehouse / STAGING / table
        self.sealing_dir = self.table_dir / "_sealing"

    @cached_property
    def store(self) -> Store:
        """The warehouse as a pyarrow filesystem (local disk, S3)."""
        return Store.of(self.warehouse_uri)

    @property
    def late_open_dir(self) -> Path:
        """Object stores: late rows of committed batches, hidden until a late partition version
        takes them in."""
        return self.late_dir / "_open"

    def versioned_hour(self, base: Path, hour_path: str, version: int, through_batch: int) -> Path:
        """A version of a registered partition on an object store, named by its content (the
        step's version and the last batch it holds), so a retry finds its own directory and a
        later step never overwrites one a reader may be listing."""
        return base / hour_path / VERSIONS / f"v{version:04d}-b{through_batch:010d}"

    def snapshot_version(self, partition_dir: Path, run_id: str, content: str) -> Path:
        """Object stores: a version of a snapshot partition, named by the run and what it read
        (a retry of the run finds it; a run reading other hours or another base writes anew)."""
        digest = hashlib.sha256(f"{run_id}\n{content}".encode()).hexdigest()[:12]
        return partition_dir / VERSIONS / f"s{digest}"

    def hour_version(self, hour_path: str, version: int, through_batch: int) -> Path:
        """Object stores: the directory of version ``version`` of a sealed hour holding the
        batches through ``through_batch`` (a quarantine, version 0, is its seal's directory)."""
        return self.versioned_hour(self.table_dir, hour_path, max(version, 1), through_batch)

    def batch_staging(self, batch_id: int) -> Path:
        return self.staging_root / batch_dir_name(batch_id)

    def dirty_file(self, batch_id: int, index: int) -> Path:
        return self.dirty_batch_dir(batch_id) / dirty_file_name(index)

    def dirty_batch_dir(self, batch_id: int) -> Path:
        """The visible dirty records of a batch (a partition of ``<table>__dirty``)."""
        return self.dirty_dir / f"batch_id={batch_id}"

    def open_dirty_dir(self, batch_id: int) -> Path:
        """Object stores: a batch's dirty records as its tasks wrote them, hidden until its
        commit record (then copied to ``dirty_batch_dir``)."""
        return self.dirty_dir / "_open" / f"batch_id={batch_id}"

    def replayed_dirty_dir(self, batch_id: int) -> Path:
        """Where a batch's dirty records go once a replay has classified them again: hidden from
        readers of ``<table>__dirty``, kept as the replay's input."""
        return self.dirty_dir / "_replayed" / f"batch_id={batch_id}"

    def dirty_batches(self) -> list[int]:
        """Batches with visible dirty records, in order (files without rows do not count)."""
        batches = set()
        for relative in self.store.files(self.relative(self.dirty_dir)):  # _replayed is hidden
            batch = relative.rsplit("/", 2)[-2].removeprefix("batch_id=")
            if batch.isdigit() and int(batch) not in batches and self.store.rows(relative):
                batches.add(int(batch))
        return sorted(batches)

    def visible_dirty_files(self, batch_id: int) -> list[str]:
        """A batch's dirty files readers of ``<table>__dirty`` see, as URIs."""
        return [self.store.uri(f) for f in self.store.files(self.relative(self.dirty_batch_dir(batch_id)))]

    def dirty_files_of(self, batch_id: int) -> list[str]:
        """A batch's dirty files as URIs, visible or replayed (a batch's records are in one of
        them; on an object store both hold the same files between a replay's commit record and
        the deletion of the visible ones)."""
        visible = self.visible_dirty_files(batch_id)
        if visible:
            return visible
        return [self.store.uri(f) for f in self.store.files(self.relative(self.replayed_dirty_dir(batch_id)))]

    def step_staging(self, step: str, hour_key: str, run_id: str) -> Path:
        """Scratch of one seal, amend or rebuild step of an hour (``step`` names it)."""
        return self.staging_root / f"{step}-{hour_key}-{run_key(run_id)}"

    def location(self, path: Path) -> str:
        """A warehouse path as the metastore registers it (``s3a://`` on S3)."""
        return self.store.metastore_location(self.relative(path), str(path))

    def uri(self, path: Path) -> str:
        """A warehouse path as pyarrow and tidemark's readers address it (``s3://...`` on S3)."""
        return self.store.uri(self.relative(path))

    def store_relative(self, location: str) -> str:
        """A location the metastore registered (``s3a://...``, ``file:/...`` or a path) as a
        warehouse-relative path; "" for one outside the warehouse."""
        location = local_path(location)
        for root in (hadoop_uri(self.warehouse_uri), self.warehouse_uri):
            if location.rstrip("/").startswith(root + "/"):
                return location.rstrip("/")[len(root) + 1 :]
        return ""

    def relative(self, path: Path) -> str:
        """A warehouse-relative path, as the commit log and the journal record files."""
        return str(path.relative_to(self.warehouse))
