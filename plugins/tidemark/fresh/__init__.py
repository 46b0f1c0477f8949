"""The fresh read of a table: every committed record, readable by name within seconds of its
batch's commit, beside the complete read (``T``), which changes only by whole hours.

One seam, ``FreshRead``, chosen once per table by its format (``fresh_read``):

- an Iceberg table: the branch ``fresh`` (``fresh.iceberg_branch``);
- a Hive table: the table ``<table>_fresh`` in the metastore service (``fresh.hive_table``);
- ``output.fresh: false``: none.

What it holds is ``fresh.files``. Jobs keep it in step: the dump (and each stream
micro-batch) after its commit, the seal after its steps; no file the read names, or named a
moment ago, is deleted while a query may still read it (``FreshGate``). A failed sync never fails the job whose data is committed: the fresh read
lags (``tidemark status`` shows by how much) and the next job's sync catches it up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from tidemark.errors import InjectedFault
from tidemark.fresh.files import FreshSync
from tidemark.fresh.hive_table import HiveFreshTable
from tidemark.fresh.iceberg_branch import IcebergFreshBranch

if TYPE_CHECKING:
    from tidemark.state.journal import JournalEntry, JournalState
    from tidemark.table import Table

log = logging.getLogger(__name__)


class FreshRead(Protocol):
    """A table's fresh read: brought in step with its state by ``sync``."""

    name: str  # how readers address it, e.g. "branch fresh"
    # whether it holds its own links to the files it names (a Hive table's mirrors), so the
    # files a step replaced may be deleted at once; else they stay ``output.fresh_grace``
    self_contained: bool

    def sync(self, reason: str, *, make_table: bool = False) -> FreshSync:
        """Bring the fresh read in step with the table's state now; ``make_table``: the caller
        may start Spark (the seal), so a table not made yet may be made for it."""
        ...

    def warm_up(self) -> None:
        """Pay the sync's fixed costs ahead (imports, the catalog): a job calls it while it
        waits on something else (the dump's forked readers); a failure is left to the sync."""
        ...

    def synced_through(self) -> int:
        """The journal step the fresh read reflects (-1: none known)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What readers see now: ``read``, ``exists``, ``through_batch``, ``journal_seq``,
        ``changed_at``."""
        ...

    def referenced(self) -> list[str]:
        """The metastore locations it points readers at, which a collector of versions keeps."""
        ...


# the fresh read of each ``output.table_format`` that has one, chosen once per table
# (None: the table's deployment has none: a Hive table without a metastore service)
FRESH_READS: dict[str, Callable[[Table], FreshRead | None]] = {
    "iceberg": IcebergFreshBranch.of,
    "hive": HiveFreshTable.of,
}


def fresh_read(table: Table) -> FreshRead | None:
    """The table's fresh read, or None (``output.fresh: false``, a format without one, or a
    Hive table whose metastore is not a service: ``hive_table``)."""
    kind = FRESH_READS.get(table.config.output.table_format)
    if not table.config.output.fresh or kind is None:
        return None
    return kind(table)


def sync_fresh(
    table: Table, reason: str, fresh: FreshRead | None = None, *, make_table: bool = False
) -> FreshSync | None:
    """Bring the table's fresh read in step (``fresh``: the one already chosen; ``make_table``:
    see ``FreshRead.sync``); what the sync did, or None when the table has none or the sync
    failed (logged: the job goes on)."""
    fresh = fresh if fresh is not None else fresh_read(table)
    if fresh is None:
        return None
    try:
        return fresh.sync(reason, make_table=make_table)
    except InjectedFault:
        raise
    except Exception as exc:  # the batch or hour is committed: the fresh read only lags
        log.warning(
            "%s: the fresh read (%s) could not be brought in step (%s): %s: %s; it lags until the "
            "next dump or seal syncs it",
            table.name,
            fresh.name,
            reason,
            type(exc).__name__,
            exc,
        )
        return None


def fresh_status(table: Table, last_committed: int) -> dict[str, Any] | None:
    """The fresh read for status pages: what ``describe`` says, and how many committed batches
    it lacks (``batches_behind``); None where the table has none."""
    fresh = fresh_read(table)
    if fresh is None:
        return None
    try:
        info = fresh.describe()
    except Exception as exc:  # a catalog that does not answer: the page says so and goes on
        return {"read": fresh.name, "error": f"{type(exc).__name__}: {exc}"}
    through = info["through_batch"]
    info["batches_behind"] = last_committed - through if through >= 0 else None
    return info


def describe_fresh(info: dict[str, Any] | None) -> str:
    """One line of ``fresh_status`` for a person."""
    if info is None:
        return "fresh read: none (output.fresh: false, or a Hive table without a metastore service)"
    if "error" in info:
        return f"fresh read: {info['read']}, not readable now: {info['error']}"
    if not info["exists"]:
        return (
            f"fresh read: {info['read']}, none yet (the first sync makes it: a Hive table's first dump, an "
            "Iceberg table's first seal)"
        )
    behind = info["batches_behind"]
    state = "in step" if behind == 0 else f"{behind} committed batches behind" if behind else "no batch yet"
    return (
        f"fresh read: {info['read']} through batch {info['through_batch']} ({state}), "
        f"last changed {info['changed_at']}"
    )


class FreshGate:
    """When the files a step replaced may be deleted (an hour's batch files once it is sealed,
    late files once amended in): at once where the table has no fresh read; else once the
    fresh read no longer names them (a sync reflects the step's journal entry) and
    ``output.fresh_grace`` has passed since the step, so a query that planned on the fresh
    read just before still finds every file it planned (wall clock: the grace is readers')."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.fresh = fresh_read(table)
        self.grace = table.config.output.fresh_grace
        self._synced: int | None = None  # the journal step the fresh read reflects, once known

    def sync(self, reason: str) -> bool:
        """Bring the fresh read in step (True: it is, or the table has none)."""
        if self.fresh is None:
            return True
        done = sync_fresh(self.table, reason, self.fresh, make_table=True)  # the seal's jobs: Spark at hand
        if done is not None:
            self._synced = done.journal_seq
        return done is not None

    @property
    def present(self) -> bool:
        """Whether the table has a fresh read to keep in step."""
        return self.fresh is not None

    @property
    def immediate(self) -> bool:
        """Replaced files may go as soon as the step's journal entry is written."""
        return self.fresh is None or self.fresh.self_contained

    def referenced(self) -> list[str] | None:
        """The metastore locations the fresh read points at (none without one); None where it
        cannot say now: a collector then deletes nothing this run."""
        if self.fresh is None:
            return []
        try:
            return self.fresh.referenced()
        except Exception as exc:
            log.warning(
                "%s: where the fresh read (%s) points is unknown now: %s: %s",
                self.table.name,
                self.fresh.name,
                type(exc).__name__,
                exc,
            )
            return None

    def deletable(self, entry: JournalEntry) -> bool:
        """Whether the files ``entry``'s step replaced may be deleted now."""
        if self.immediate:
            return True
        assert self.fresh is not None
        if self._synced is None:
            self._synced = self.fresh.synced_through()
        past = datetime.fromisoformat(entry.sealed_at) + self.grace <= datetime.now(UTC)
        return entry.seq <= self._synced and past

    def past_grace(self, journal: JournalState) -> JournalState:
        """``journal`` with only the hours whose replaced files may be deleted now."""
        if self.immediate:
            return journal
        kept = {key: entry for key, entry in journal.hours.items() if self.deletable(entry)}
        return replace(journal, hours=kept)
