"""What the fresh read of a table holds at one moment: every committed record once.

It is a pure function of three things read in that order, after the fresh read's own state
(``fresh.iceberg_branch`` loads its branch head first, so any change since fails its commit):

- the **journal**: each published hour's current version (its ``files``); a quarantined hour
  is in neither read until it is released, an hour dropped by retention in neither;
- the **commit log**: the batches committed through ``last_committed``;
- the **inputs** where the dump leaves them (``hourcommit.inputs``): the committed batch
  files of every hour not in the journal (its ``_open`` directory), and, where late rows are
  amended into their hours (``late_policy: amend``), the committed late files of a published
  hour from batches after the ones its version folded in.

A file leaves this set only when the journal names a version that holds its rows, so the
hour's rows are never in the set twice nor missing from it; the seal deletes an hour's batch
files only once the fresh read no longer names them (``seal.sealing``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote

from tidemark.state.commitlog import CommittedFiles
from tidemark.time.hours import Hour, parse_key, parse_path

if TYPE_CHECKING:
    from tidemark.state.commitlog import LogState
    from tidemark.state.journal import JournalState
    from tidemark.table import Table

SEALED, OPEN, LATE = "sealed", "open", "late"


@dataclass
class FreshSync:
    """What one sync of a fresh read did: the files it added (an Iceberg branch's; a Hive
    table's links into mirrors) and what it removed (the branch's files; the Hive table's
    partitions dropped), the batch and journal step the read reflects now, and the Iceberg
    snapshot it committed (None: none, or it was there already)."""

    table: str
    through_batch: int = -1
    journal_seq: int = -1
    added: int = 0
    removed: int = 0
    snapshot_id: int | None = None
    open_hours: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FreshFile:
    """One file of the fresh read: warehouse-relative, its hour and where it comes from
    (``sealed``: a published version; ``open``: a committed batch of an hour not sealed yet;
    ``late``: committed late rows not yet amended in)."""

    relative: str
    hour: Hour
    kind: str

    @property
    def complete(self) -> bool:
        """Whether the file's rows are in the complete read too."""
        return self.kind == SEALED

    def partition_values(self, columns: list[str]) -> dict[str, str]:
        """The file's values of the partition ``columns``: ``dt`` and ``hr`` its hour's, the
        data-derived ones from its path's ``column=value`` directories (Hive's ``%XX``
        escapes undone)."""
        values = dict(self.hour.spec)
        for part in self.relative.split("/")[:-1]:
            name, equals, value = part.partition("=")
            if equals and unquote(name) in columns and unquote(name) not in values:
                values[unquote(name)] = unquote(value)
        return {c: values[c] for c in columns if c in values}


def fresh_files(table: Table, state: LogState, journal: JournalState) -> dict[str, FreshFile]:
    """The fresh read of ``table`` for this commit log and journal state (see the module)."""
    layout, inputs, zone = table.layout, table.commit.inputs, table.config.event_time.time_zone
    committed = CommittedFiles(table.state.commit_log)
    found: dict[str, FreshFile] = {}

    def add(relative: str, hour: Hour, kind: str) -> None:
        found[relative] = FreshFile(relative, hour, kind)

    for key, entry in journal.hours.items():
        if not entry.published:
            continue
        hour = parse_key(key, zone)
        for relative in entry.files:
            add(relative, hour, SEALED)
        # late rows committed beyond those its version folded in (listed only then: a stream
        # syncs every micro-batch, and an object store lists each hour's late directory)
        if table.config.late_policy == "amend" and state.late_per_hour.get(hour.path, 0) > entry.late:
            for path in inputs.batch_files(
                inputs.late_inputs(hour),
                through=state.last_committed,
                after=entry.folded_through_batch,
                committed=committed,
            ):
                add(layout.relative(path), hour, LATE)
    for hour_path, rows in sorted(state.rows_per_hour.items()):
        hour = parse_path(hour_path, zone)
        if not rows or hour.key in journal.hours or journal.dropped_by_retention(hour.start):
            continue
        for path in inputs.batch_files(
            layout.open_dir / hour_path, through=state.last_committed, after=-1, committed=committed
        ):
            add(layout.relative(path), hour, OPEN)
    return found
