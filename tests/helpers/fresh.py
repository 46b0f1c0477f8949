"""A reader that keeps reading a table's fresh read by name while jobs write it, and checks
each sample as it comes: no record twice, every record one the broker was sent and one the
commit log had committed by the time the sample was read, and no record a previous sample
held missing from a later one (committed records never leave the fresh read)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog

BRANCH = "fresh"


class FreshSampler(threading.Thread):
    """Reads the fresh branch of an Iceberg table in a loop until ``stop`` (pyiceberg, by the
    table's name in the catalog, its branch's head each time)."""

    def __init__(self, settings: Settings, table: str) -> None:
        super().__init__(daemon=True)
        self.settings, self.table = settings, table
        self.sent: set[tuple[int, int]] = set()  # every record produced so far (added before it is)
        self.samples: list[int] = []  # rows per sample
        self.problems: list[str] = []
        self._stopping = threading.Event()
        self._last: set[tuple[int, int]] = set()

    def expect(self, delivered: list[tuple[int, int, Any]]) -> None:
        self.sent.update((p, o) for p, o, _ in delivered)

    def run(self) -> None:
        catalog = open_catalog(self.settings)
        log = CommitLog(self.settings.state_dir, self.table)
        while not self._stopping.is_set():
            try:
                iceberg = catalog.load_table(identifier(self.table))
            except Exception:  # not created yet (its first seal makes it)
                self._stopping.wait(0.2)
                continue
            ref = iceberg.metadata.refs.get(BRANCH)
            if ref is None:
                self._stopping.wait(0.2)
                continue
            try:  # every file the head names must be there (a reader's failure is a finding)
                frame = iceberg.scan(snapshot_id=ref.snapshot_id).to_arrow()
            except Exception as exc:
                self.problems.append(f"sample {len(self.samples)}: {type(exc).__name__}: {exc}")
                continue
            keys = list(zip(frame["_mq_partition"].to_pylist(), frame["_mq_offset"].to_pylist(), strict=True))
            self._check(keys, log)
            self.samples.append(len(keys))
            self._stopping.wait(0.05)  # a reader's pace, not a busy loop beside the jobs

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
