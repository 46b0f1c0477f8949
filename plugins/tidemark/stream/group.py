"""One Spark application hosting the continuous queries of a group's tables.

Each table in stream mode gets its own thread running :func:`run_stream` (its own query,
checkpoint, lease, commit log and status record), so a table whose query fails stops alone;
the application restarts it after ``RESTART_AFTER_S`` while the table stays in stream mode.
Every ``POLL_S`` the application looks again at the group's tables' modes: a table switched to
stream joins, a table switched back to batch leaves (its query stops after its micro-batch).
Who the group's tables are (every YAML and family, parsed and checked) is read again only every
``MEMBERS_REFRESH_S``: a fleet's configs are not re-read every few seconds. It holds the
group's stream lock, so a second launch for the same group exits at once; it ends when no
table of the group is in stream mode any more (or, ``until_caught_up``, when every table's
query has caught up).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.group.members import GROUPS_DIR, group_members
from tidemark.group.runner import TABLE_POOL
from tidemark.state.locks import TableLock
from tidemark.state.mode import STREAM
from tidemark.state.storage import Location
from tidemark.stream.runner import run_stream
from tidemark.table import Table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.config import TableConfig
    from tidemark.settings import Settings

log = logging.getLogger(__name__)

POLL_S = 5.0
RESTART_AFTER_S = 60.0
MEMBERS_REFRESH_S = 60.0


class GroupMembership:
    """The group's runnable tables, read again at most every ``refresh_s`` of ``clock``
    (monotonic seconds)."""

    def __init__(
        self,
        load: Callable[[], list[TableConfig]],
        refresh_s: float = MEMBERS_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load, self._refresh_s, self._clock = load, refresh_s, clock
        self._members: list[TableConfig] = []
        self._read_at: float | None = None

    def members(self) -> list[TableConfig]:
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._refresh_s:
            self._members, self._read_at = self._load(), now
        return self._members


def group_stream_lock(settings: Settings, group: str) -> TableLock:
    """Held by the application hosting the group's queries while it runs."""
    return TableLock(Location(settings.state_location) / GROUPS_DIR, group, "stream")


@dataclass
class _TableStream:
    """One table's query thread and how it ended."""

    thread: threading.Thread
    ended: float = 0.0  # monotonic seconds, once the thread is done
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def run_group_streams(
    spark: SparkSession,
    group: str,
    settings: Settings,
    run_id: str,
    *,
    clock: Callable[[], datetime],
    until_caught_up: bool = False,
    trigger_interval_s: float | None = None,
    poll_s: float = POLL_S,
    restart_after_s: float = RESTART_AFTER_S,
    members_refresh_s: float = MEMBERS_REFRESH_S,
) -> dict[str, Any]:
    """Host the streams of ``group``'s tables in this session until none is in stream mode."""

    streams: dict[str, _TableStream] = {}
    membership = GroupMembership(lambda: group_members(group, settings), members_refresh_s)

    def host(config: TableConfig, entry: _TableStream) -> None:
        spark.sparkContext.setLocalProperty(TABLE_POOL, config.table)  # its own fair-scheduler pool
        try:
            entry.result = run_stream(
                spark,
                config,
                settings,
                run_id,
                clock=clock,
                until_caught_up=until_caught_up,
                trigger_interval_s=trigger_interval_s,
            )
        except Exception as exc:  # the table's own failure (its status record says it too)
            entry.error = f"{type(exc).__name__}: {exc}"[:2000]
            log.exception("%s (group %s): its stream failed", config.table, group)
        finally:
            entry.ended = time.monotonic()

    with group_stream_lock(settings, group).hold(run_id, wait=0):
        log.info("group %s: hosting the streams of its tables in stream mode (run %s)", group, run_id)
        while True:
            now = time.monotonic()
            members = membership.members()
            for config in members:
                if Table.read(config, settings).state.writer.current().mode != STREAM:
                    continue
                entry = streams.get(config.table)
                if entry is not None and (entry.thread.is_alive() or until_caught_up):
                    continue
                if entry is not None and entry.error and now - entry.ended < restart_after_s:
                    continue  # failed: started again after a pause (ended cleanly: at once)
                thread = threading.Thread(target=lambda c=config: host(c, streams[c.table]), daemon=True)
                streams[config.table] = _TableStream(thread)
                log.info("group %s: starting the stream of %s", group, config.table)
                thread.start()
            alive = [t for t, e in streams.items() if e.thread.is_alive()]
            if not alive and (until_caught_up or not _any_in_stream_mode(members, settings)):
                break
            time.sleep(poll_s)
    failed = sorted(t for t, e in streams.items() if e.error)
    log.info("group %s: every stream ended%s", group, f"; failed: {', '.join(failed)}" if failed else "")
    return {
        "group": group,
        "run_id": run_id,
        "status": "partly_failed" if failed else "stopped",
        "failed": failed,
        "tables": {t: {"error": e.error} if e.error else e.result for t, e in sorted(streams.items())},
    }


def _any_in_stream_mode(members: list[TableConfig], settings: Settings) -> bool:
    return any(Table.read(c, settings).state.writer.current().mode == STREAM for c in members)
