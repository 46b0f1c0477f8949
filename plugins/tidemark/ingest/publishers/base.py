"""The batch publisher's interface: how a batch's files reach the table around its commit
record (``ingest/dump.py`` steps 6-8), one implementation per kind of warehouse
(``renaming``: staged then moved; ``versioned``: written once in place)."""

from __future__ import annotations

import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Collection

from tidemark.ingest.staging import StagingTargets
from tidemark.state.layout import Layout

_ATTEMPT_DIR = re.compile(r"^attempt-t(\d{10})-")


def attempt_token(directory: str) -> int | None:
    """The lease token in an attempt directory's name (``attempt-t0000000042-<id>``)."""
    match = _ATTEMPT_DIR.match(directory)
    return int(match.group(1)) if match else None


class BatchPublisher(ABC):
    """Publishes one attempt's files of a batch, and undoes earlier uncommitted attempts."""

    def __init__(self, layout: Layout, batch_id: int, token: int | None = None) -> None:
        self.layout = layout
        self.batch_id = batch_id
        self.token = token  # the attempt's lease token: in its files' names on an object store
        self.batch_dir = layout.batch_staging(batch_id)
        tag = f"t{token:010d}-" if token is not None else ""
        self.attempt_dir = self.batch_dir / f"attempt-{tag}{uuid.uuid4().hex[:12]}"
        self.store = layout.store

    @abstractmethod
    def staging_targets(self) -> StagingTargets:
        """Where this attempt's read tasks write."""

    @abstractmethod
    def written(self) -> dict[str, list[str]]:
        """The batch's files per kind (rows, late, dirty) as this attempt's read tasks wrote them."""

    @abstractmethod
    def rollback(self) -> int:
        """Delete files earlier uncommitted attempts of this batch published or staged."""

    @abstractmethod
    def publish(self, retire: tuple[int, ...] = ()) -> list[str]:
        """Before the commit record: make the rows ready for it; returns every file the commit
        record lists. ``retire``: batches whose dirty records this (replay) batch took over."""

    @abstractmethod
    def finish(self, committed: Collection[str] = ()) -> int:
        """After the commit record (``committed``: its files): show the late rows and dirty
        records, retire replayed inputs, drop the staging; idempotent. Returns the files shown."""
