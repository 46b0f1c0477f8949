"""The stream's record of itself and what reporters read from it: its status record
(``<state>/<table>/stream/status.json``), its checkpoint's place, its health for the Airflow
sensor, and how the checkpoint and the commit log stand at a restart."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tidemark.errors import TidemarkError
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.mode import STREAM
from tidemark.state.storage import Location, read_json, replace_atomically
from tidemark.table import Table
from tidemark.tablefs import Store

STREAM_LOCK = STREAM  # the lock that keeps a second stream of a table from starting


class StreamError(TidemarkError):
    """The stream's query failed or cannot start; names the table and what to do."""


def stream_dir(state_dir: Location | Path, table: str) -> Location:
    return Location(state_dir) / table / "stream"


def checkpoint_location(settings: Settings, table: str) -> str:
    """The query's checkpoint, beside the table's state (an S3 state store: through s3a)."""
    uri = str(stream_dir(settings.state_location, table) / "checkpoint")
    return "s3a://" + uri.removeprefix("s3://") if uri.startswith("s3://") else uri


class StreamStatus:
    """The stream's status record: written by the stream, read by everything that reports."""

    def __init__(self, state_dir: Location | Path, table: str) -> None:
        self.path = stream_dir(state_dir, table) / "status.json"

    def read(self) -> dict[str, Any] | None:
        return read_json(self.path)

    def write(self, status: dict[str, Any]) -> None:
        replace_atomically(self.path, status)


@dataclass
class Progress:
    """What the stream did since it started (its status record, in memory)."""

    table: str
    run_id: str
    started_at: str
    until_caught_up: bool
    trigger_interval_s: float
    state: str = "starting"
    query_id: str = ""
    last_epoch: int | None = None
    last_batch_id: int | None = None
    last_commit_at: str | None = None
    batches: int = 0
    records: int = 0
    rows: int = 0
    dirty: int = 0
    late: int = 0
    dump_s: float = 0.0  # seconds in the micro-batches' dumps (reading to commit), seals excluded
    seal_s: float = 0.0
    sealed: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    message: str = ""

    def to_json(self, now: datetime) -> dict[str, Any]:
        return {
            **self.__dict__,
            "sealed": self.sealed[-48:],
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "heartbeat_at": now.isoformat(),
        }


def stream_health(table: str, settings: Settings, *, stale_after: timedelta, now: datetime) -> dict[str, Any]:
    """What the sensor decides on: the writer mode, the stream's status record and whether
    its heartbeat is fresh, and whether hours were published since the last announcement."""
    table_state = Table.state_of(settings.state_location, table)
    status = StreamStatus(settings.state_location, table).read() or {}
    beat = status.get("heartbeat_at")
    age = (now - datetime.fromisoformat(beat)).total_seconds() if beat else None
    journal = table_state.journal
    unannounced = [e.hour for e in journal.entries(journal.announced_through() + 1) if e.published]
    return {
        "mode": table_state.writer.current().mode,
        "state": status.get("state", "never_started"),
        "heartbeat_age_s": round(age, 1) if age is not None else None,
        "alive": age is not None and age <= stale_after.total_seconds(),
        "message": status.get("message", ""),
        "unannounced": unannounced,
        "writer": table_state.writer.current().describe(),
        "lock": table_state.lock(STREAM_LOCK).holder(now),
        "status": status,
    }


def checkpoint_agreement(checkpoint: str, commit_log: CommitLog, table: str) -> str:
    """How the query's checkpoint and the commit log stand at a (re)start, in words for the
    log: which of the recommit cases the next micro-batch is (nothing is decided here: the run
    id binding and the plan from the commit log's ends decide it)."""
    from tidemark.stream.source import offset_ends

    store = Store.of(checkpoint)
    metadata = store.read_json("metadata")
    logged = sorted(
        int(f.rsplit("/", 1)[-1]) for f in store.all_files("offsets") if f.rsplit("/", 1)[-1].isdigit()
    )
    if not metadata or not logged:
        return f"{table}: a new query: its first micro-batch starts at the commit log's ends"
    last = logged[-1]
    done = store.exists(f"commits/{last}")
    with store.fs.open_input_stream(store.path(f"offsets/{last}")) as handle:
        ends = offset_ends(json.loads(handle.read().decode().strip().splitlines()[-1]))
    bound = commit_log.batch_of_run(f"stream-{metadata['id']}-{last}")
    committed = bound if bound is not None and commit_log.commit(bound) is not None else None
    state = commit_log.state()
    if committed is not None and not done:
        return (
            f"{table}: micro-batch {last} (ends {ends}) is committed as batch {committed} but not recorded "
            "as done by Spark: it runs again and finds its commit (nothing written twice)"
        )
    if committed is None and not done:
        return (
            f"{table}: micro-batch {last} (ends {ends}) is in the checkpoint, not in the commit log: it runs "
            f"again, rolling back what an attempt left, from the commit log's ends {state.end_offsets}"
        )
    ahead = {p: e for p, e in state.end_offsets.items() if e > ends.get(p, -1)}
    if ahead:
        return (
            f"{table}: the commit log is ahead of the checkpoint's micro-batch {last} on MQ partitions "
            f"{sorted(ahead)} (the batch DAG wrote meanwhile): micro-batches go on from the commit log"
        )
    return f"{table}: the checkpoint (micro-batch {last}) and the commit log agree"
