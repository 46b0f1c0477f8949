"""Lock records as another process or host left them."""

from __future__ import annotations

import json
import socket

from tidemark.state.locks import TableLock


def plant(lock: TableLock, seq: int, **fields: object) -> None:
    """A lock record as another process (or host) left it."""
    record = {
        "kind": "acquire",
        "host": socket.gethostname(),
        "pid": 1,
        "run_id": "other",
        "at": "2026-11-22T10:00:00+00:00",
    }
    record.update(fields)
    path = lock.root.local_path() / f"{seq:010d}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
