"""The consumer group's offsets after a batch's commit record: for lag monitoring only (the
commit log is the truth), so a failure is a warning, recorded beside the commit log for the
metrics task, never a failed batch."""

from __future__ import annotations

import logging
from typing import Any

from tidemark.config import TableConfig
from tidemark.faults import crash_point
from tidemark.ingest.kafka import commit_group_offsets
from tidemark.settings import Settings
from tidemark.state.batches import Commit
from tidemark.state.storage import replace_atomically
from tidemark.table import Table

log = logging.getLogger(__name__)


def record_group_commit(
    config: TableConfig, settings: Settings, kafka_conf: dict[str, Any], commit: Commit
) -> None:
    """Consumer-group offsets for lag monitoring, after the commit record: a failure (an ACL, a
    group shared with a live consumer) is a warning and the ``group_commit_failed`` gauge, never
    a failed batch; the outcome is recorded beside the commit log for the metrics task."""
    if not commit.ranges:
        return
    if config.source.retired:  # the topic is gone: nothing to commit offsets of
        return
    record = Table.read(config, settings).state.commit_log.group_commit_file
    try:
        crash_point("group_commit")
        moved = commit_group_offsets(kafka_conf, config.consumer_group, commit.topic, commit.end_offsets)
    except Exception as exc:  # monitoring only: whatever the client raises, the batch stands
        log.warning(
            "%s: batch %s is committed, but committing offsets %s of consumer group %s failed (lag "
            "monitoring only; the commit log is the truth): %s",
            config.table,
            commit.batch_id,
            commit.end_offsets,
            config.consumer_group,
            exc,
        )
        replace_atomically(record, {"batch_id": commit.batch_id, "failed": True, "error": str(exc)[:500]})
        return
    replace_atomically(record, {"batch_id": commit.batch_id, "failed": False, "committed": moved})
