"""A reader that keeps reading a table's fresh read by name while jobs write it, and checks
each sample as it comes: no record twice, every record one the broker was sent and one the
commit log had committed by the time the sample was read, and no record a previous sample
held missing from a later one (committed records never leave the fresh read)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253

from tests.helpers.jobs import job_env
from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.metastore_service import MetastoreConnection
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.layout import Layout

BRANCH = "fresh"
KEYS = ["_mq_partition", "_mq_offset"]


def hive_locations(settings: Settings, name: str) -> dict[tuple[str, ...], str] | None:
    """The Hive table ``name``'s partitions and where each points, as the metastore service
    answers (one call, as a reader plans); None where the table does not exist."""
    connection = MetastoreConnection(settings.hive_metastore_uris, name)
    try:
        if connection.table(name) is None:
            return None
        return {tuple(p.values): str(p.sd.location) for p in connection.partitions(name)}
    finally:
        connection.close()


def hive_fresh_locations(settings: Settings, table: str) -> dict[tuple[str, ...], str] | None:
    """``<table>_fresh``'s partitions and where each points (None before it exists)."""
    return hive_locations(settings, f"{table}_fresh")


def hive_rows(settings: Settings, name: str, columns: list[str] = KEYS) -> list[tuple[Any, ...]] | None:
    """Every row of the Hive table ``name`` as a Hive reader reads it by name: its partitions
    from the metastore, then every data file each location holds now (hidden names
    skipped); the ``columns`` of each row. None where the table does not exist."""
    located = hive_locations(settings, name)
    if located is None:
        return None
    layout = Layout(settings, name)
    rows: list[tuple[Any, ...]] = []
    for location in located.values():
        for relative in layout.store.files(layout.store_relative(location)):
            with layout.store.fs.open_input_file(layout.store.path(relative)) as handle:
                read = pq.read_table(handle, columns=columns)
            rows += list(zip(*(read.column(c).to_pylist() for c in columns), strict=True))
    return rows


def hive_fresh_rows(
    settings: Settings, table: str, columns: list[str] = KEYS
) -> list[tuple[Any, ...]] | None:
    """Every row of ``<table>_fresh`` as a Hive reader reads it by name (``hive_rows``)."""
    return hive_rows(settings, f"{table}_fresh", columns)


SPARK_HIVE_READER = """
import json, sys
from tidemark.settings import Settings
from tidemark.spark import build_session

spark = build_session("hive-reader", Settings.from_env())
rows = spark.sql(f"SELECT _mq_partition, _mq_offset FROM default.{sys.argv[1]}").collect()
print(json.dumps([list(r) for r in rows]))
"""


def spark_hive_rows(settings: Settings, name: str) -> Counter[tuple[int, int]]:
    """The Hive table ``name`` read by Spark SQL by name through ``settings``' metastore
    service, in a process of its own (this process's session has its own Derby)."""
    done = subprocess.run(
        [sys.executable, "-c", SPARK_HIVE_READER, name],
        env={**job_env(settings), "TIDEMARK_JVM_CLASS_ARCHIVE": "off"},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return Counter((int(p), int(o)) for p, o in json.loads(done.stdout.strip().splitlines()[-1]))


class FreshSampler(threading.Thread):
    """Reads the fresh read of a table in a loop until ``stop``, by name: an Iceberg table's
    branch ``fresh`` (pyiceberg, its head each time), a Hive table's ``<table>_fresh`` (its
    partitions from the metastore service, then their files)."""

    def __init__(self, settings: Settings, table: str, kind: str = "iceberg") -> None:
        super().__init__(daemon=True)
        self.settings, self.table, self.kind = settings, table, kind
        self.sent: set[tuple[int, int]] = set()  # every record produced so far (added before it is)
        self.samples: list[int] = []  # rows per sample
        self.problems: list[str] = []
        self._stopping = threading.Event()
        self._last: set[tuple[int, int]] = set()

    def expect(self, delivered: list[tuple[int, int, Any]]) -> None:
        self.sent.update((p, o) for p, o, _ in delivered)

    def run(self) -> None:
        log = CommitLog(self.settings.state_dir, self.table)
        read = self._iceberg_reader() if self.kind == "iceberg" else self._hive_read
        while not self._stopping.is_set():
            try:  # every file a read plans must be there (a reader's failure is a finding)
                keys = read()
            except Exception as exc:
                self.problems.append(f"sample {len(self.samples)}: {type(exc).__name__}: {exc}")
                continue
            if keys is None:  # not made yet (the table's first seal makes it)
                self._stopping.wait(0.2)
                continue
            self._check(keys, log)
            self.samples.append(len(keys))
            self._stopping.wait(0.05)  # a reader's pace, not a busy loop beside the jobs

    def _iceberg_reader(self) -> Any:
        catalog = open_catalog(self.settings)

        def read() -> list[tuple[int, int]] | None:
            try:
                iceberg = catalog.load_table(identifier(self.table))
            except Exception:  # not created yet
                return None
            ref = iceberg.metadata.refs.get(BRANCH)
            if ref is None:
                return None
            frame = iceberg.scan(snapshot_id=ref.snapshot_id).to_arrow()
            return list(zip(frame["_mq_partition"].to_pylist(), frame["_mq_offset"].to_pylist(), strict=True))

        return read

    def _hive_read(self) -> list[tuple[int, int]] | None:
        rows = hive_fresh_rows(self.settings, self.table)
        return None if rows is None else [(int(p), int(o)) for p, o in rows]

    def _check(self, keys: list[tuple[int, int]], log: CommitLog) -> None:
        twice = [k for k, n in Counter(keys).items() if n > 1]
        if twice:
            self.problems.append(f"sample {len(self.samples)}: read twice {twice[:5]}")
        found = set(keys)
        if found - self.sent:
            self.problems.append(
                f"sample {len(self.samples)}: never produced {sorted(found - self.sent)[:5]}"
            )
        ends = log.state().end_offsets  # committed by now, so by the read too if committed then
        uncommitted = [k for k in found if k[1] >= ends.get(k[0], 0)]
        if uncommitted:
            self.problems.append(f"sample {len(self.samples)}: not committed {sorted(uncommitted)[:5]}")
        if self._last - found:
            self.problems.append(
                f"sample {len(self.samples)}: left the fresh read {sorted(self._last - found)[:5]}"
            )
        self._last = found

    def stop(self) -> list[int]:
        """Stop reading; the rows per sample (the problems are in ``problems``)."""
        self._stopping.set()
        self.join(timeout=60)
        return self.samples
