"""The table lock: one batch-changing job of a table at a time, across processes.

A create-only lock record names its holder (host, pid, run id). A lock left by a dead process
on this host is broken automatically; one held by a live process makes the second writer
fail cleanly with the holder's identity.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from tidemark.errors import BatchConflictError
from tidemark.state.storage import Location, create_only, delete, read_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LockOwner:
    host: str
    pid: int
    run_id: str


class TableLock:
    """A create-only lock file serialising batches of one table across processes.

    A lock left by a dead process on this host is broken automatically; one held by a live
    process makes the second writer fail cleanly with the holder's identity.
    """

    def __init__(self, state_dir: Location | Path, table: str, name: str = "batch") -> None:
        self.table = table
        self.name = name
        self.path = Location(state_dir) / table / f"{name}.lock"

    def _owner(self) -> LockOwner | None:
        data = read_json(self.path)
        return LockOwner(**data) if data else None

    @contextmanager
    def hold(self, run_id: str) -> Iterator[None]:
        me = LockOwner(socket.gethostname(), os.getpid(), run_id)
        if not create_only(self.path, asdict(me)):
            owner = self._owner()
            if owner and owner.host == me.host and not _pid_alive(owner.pid):
                log.warning(
                    "%s: breaking stale %s lock of dead pid %s (run %s)",
                    self.table,
                    self.name,
                    owner.pid,
                    owner.run_id,
                )
                delete(self.path)
                if not create_only(self.path, asdict(me)):
                    raise BatchConflictError(f"{self.table}: lost the race for the {self.name} lock")
            else:
                raise BatchConflictError(
                    f"{self.table}: another job holds the {self.name} lock (host "
                    f"{owner.host if owner else '?'}, pid {owner.pid if owner else '?'}, run "
                    f"{owner.run_id if owner else '?'}); this attempt did nothing and can be retried"
                )
        try:
            yield
        finally:
            if self._owner() == me:
                delete(self.path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
