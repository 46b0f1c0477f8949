"""One create-only, sequential log of JSON records: the commit log's plans and commits, the
hour journal and the snapshot log are all built on it.

Records are ``<dir>/<seq:010d>.json``, written whole and never overwritten: the second writer
of a sequence number loses cleanly (``create`` returns False). Readers probe sequential names
and never list a directory that grows forever (the failure mode of Spark's file-sink metadata
log); a checkpoint beside the records, atomically replaced, lets them start later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tidemark.state.storage import Location, create_only, read_json, replace_atomically

Record = dict[str, Any]


def record_name(seq: int) -> str:
    return f"{seq:010d}.json"


class SequentialLog:
    """Records ``0..n`` under ``directory``; ``checkpoint`` (optional) holds a folded state."""

    def __init__(self, directory: Location, checkpoint: Location | None = None) -> None:
        self.directory = directory
        self.checkpoint_file = checkpoint
        self._known = 0  # records 0.._known-1 were seen to exist (they never go away)

    def path(self, seq: int) -> Location:
        return self.directory / record_name(seq)

    def read(self, seq: int) -> Record | None:
        return read_json(self.path(seq))

    def create(self, seq: int, record: Record) -> bool:
        """Write record ``seq`` if nobody did; False when another writer was first."""
        return create_only(self.path(seq), record)

    def records(self, since: int = 0) -> Iterator[tuple[int, Record]]:
        """(seq, record) from ``since`` up to the first missing number."""
        seq = since
        while (record := self.read(seq)) is not None:
            yield seq, record
            seq += 1

    def append(self, build: Callable[[int], Record], *, attempts: int = 20) -> tuple[int, Record] | None:
        """Write ``build(seq)`` at the next free number, retrying when another writer takes it;
        None if the log kept moving for ``attempts`` tries."""
        for _ in range(attempts):
            seq = self.next_seq()
            record = build(seq)
            if self.create(seq, record):
                self._known = seq + 1
                return seq, record
        return None

    def next_seq(self) -> int:
        """The first free number, in O(log n) reads: records are contiguous from 0, so a
        galloping probe from the last number known to exist, then a binary search, finds it
        (an append no longer reads every record: GETs on S3)."""
        low = self._known  # every number below exists
        step = 1
        while self.read(low + step - 1) is not None:
            low, step = low + step, step * 2
        high = low + step - 1  # missing
        while low < high:  # low: maybe missing, everything below exists; high: missing
            middle = (low + high) // 2
            if self.read(middle) is not None:
                low = middle + 1
            else:
                high = middle
        self._known = low
        return low

    # -- checkpoint ----------------------------------------------------------------------
    def read_checkpoint(self) -> Record | None:
        return read_json(self.checkpoint_file) if self.checkpoint_file is not None else None

    def write_checkpoint(self, state: Record) -> None:
        assert self.checkpoint_file is not None, "this log keeps no checkpoint"
        replace_atomically(self.checkpoint_file, state)
