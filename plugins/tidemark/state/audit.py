"""The audit log of a table: every operator decision (resolve, switch, release), in order,
create-only. It lives beside the commit log, since several jobs append to it (the dump and the
replay record the accept decisions they honour, the writer switch its changes)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tidemark.errors import ResolveError
from tidemark.state.seqlog import SequentialLog
from tidemark.state.storage import Location


@dataclass(frozen=True)
class AuditRecord:
    """One operator decision: who, when, why, and what it changed."""

    seq: int
    table: str
    action: str
    reason: str
    by: str
    at: str  # wall clock of the decision
    batch_id: int | None
    offsets: str  # the plan's ranges as text (topic[partition] start..end)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        batch = f"batch {self.batch_id}" if self.batch_id is not None else "offsets"
        return f"#{self.seq} {self.at} {self.action} {batch} by {self.by}: {self.reason} ({self.offsets})"


class AuditLog:
    """The table's operator decisions, in order (create-only, sequential)."""

    def __init__(self, state_dir: Location | Path, table: str) -> None:
        self.table = table
        self._log = SequentialLog(Location(state_dir) / table / "audit")

    def records(self) -> Iterator[AuditRecord]:
        for _, data in self._log.records():
            yield AuditRecord(**data)

    def append(self, **fields: Any) -> AuditRecord:
        written = self._log.append(lambda seq: AuditRecord(seq=seq, table=self.table, **fields).to_json())
        if written is None:
            raise ResolveError(f"{self.table}: could not record the decision: the audit log keeps moving")
        return AuditRecord(**written[1])

    def accepted(self, batch_id: int) -> AuditRecord | None:
        """The ``accept`` decision of a batch, if one was recorded."""
        return next((r for r in self.records() if r.action == "accept" and r.batch_id == batch_id), None)
