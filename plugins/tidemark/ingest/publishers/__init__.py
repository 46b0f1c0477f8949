"""How a batch's files reach the table around its commit record: ``base.BatchPublisher``, one
implementation per kind of warehouse, chosen once here (staged then moved on a filesystem with
rename, written once in place on an object store)."""

from __future__ import annotations

from tidemark.ingest.publishers.base import BatchPublisher
from tidemark.ingest.publishers.renaming import RenamingPublisher
from tidemark.ingest.publishers.versioned import VersionedPublisher
from tidemark.state.layout import Layout

_IMPLEMENTATIONS: dict[str, type[BatchPublisher]] = {
    "filesystem": RenamingPublisher,
    "object_store": VersionedPublisher,
}


def publisher(layout: Layout, batch_id: int, token: int | None = None) -> BatchPublisher:
    """The publisher of one attempt at ``batch_id`` (``token``: its lease's), by the table's
    ``layout.kind`` (its warehouse, or ``output.layout``)."""
    return _IMPLEMENTATIONS[layout.kind](layout, batch_id, token)
