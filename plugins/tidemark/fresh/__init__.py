"""The fresh read of a table: every committed record, readable by name within seconds of its
batch's commit, beside the complete read (``T``), which changes only by whole hours.

One seam, ``FreshRead``, chosen once per table by its format (``fresh_read``):

- an Iceberg table: the branch ``fresh`` (``fresh.iceberg_branch``);
- a Hive table: none yet (``<table>_fresh`` is to come: docs/operations.md);
- ``output.fresh: false``: none.

What it holds is ``fresh.files``. Jobs keep it in step: the dump (and each stream
micro-batch) after its commit, the seal before it deletes any file the read may name
(``FreshGate``). A failed sync never fails the job whose data is committed: the fresh read
lags (``tidemark status`` shows by how much) and the next job's sync catches it up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from tidemark.errors import InjectedFault
from tidemark.fresh.iceberg_branch import BranchSync, IcebergFreshBranch
from tidemark.hourcommit.iceberg import IcebergPublication

if TYPE_CHECKING:
    from tidemark.table import Table

log = logging.getLogger(__name__)


class FreshRead(Protocol):
    """A table's fresh read: brought in step with its state by ``sync``."""

    name: str  # how readers address it, e.g. "branch fresh"

    def sync(self, reason: str) -> BranchSync: ...


def fresh_read(table: Table) -> FreshRead | None:
    """The table's fresh read, or None (``output.fresh: false``, or a format without one)."""
    if not table.config.output.fresh:
        return None
    publication = table.commit.publication
    if isinstance(publication, IcebergPublication):
        return IcebergFreshBranch(table, publication)
    return None


def sync_fresh(table: Table, reason: str, fresh: FreshRead | None = None) -> bool:
    """Bring the table's fresh read in step (``fresh``: the one already chosen); True when it
    is (or the table has none), False when the sync failed: logged, the job goes on."""
    fresh = fresh if fresh is not None else fresh_read(table)
    if fresh is None:
        return True
    try:
        fresh.sync(reason)
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
        return False
    return True


class FreshGate:
    """Deletions of files the fresh read may still name (an hour's batch files once sealed,
    late files once amended in): at once where the table has no fresh read, else held until
    a sync has taken them out of it (``release``); held ones are dropped if it fails, and the
    next run's sweep deletes them after its own sync."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.fresh = fresh_read(table)
        self._held: list[tuple[str, Callable[[], None]]] = []

    def delete(self, what: str, action: Callable[[], None]) -> None:
        if self.fresh is None:
            action()
        else:
            self._held.append((what, action))

    def release(self, reason: str) -> bool:
        """Sync the fresh read, then run the held deletions; False (none run) if it failed."""
        if self.fresh is None:
            return True
        held, self._held = self._held, []
        if not sync_fresh(self.table, reason, self.fresh):
            if held:
                log.warning(
                    "%s: kept %s until the fresh read no longer names them",
                    self.table.name,
                    ", ".join(what for what, _ in held),
                )
            return False
        for _, action in held:
            action()
        return True
