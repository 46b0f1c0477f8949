"""The stream stops on the dump's named errors and goes on after the same operator decision as
the batch DAG (in-process: the test session's Spark runs the query)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import PROCESSING, START, fresh_table, landed
from tidemark.ingest.resolve import resolve
from tidemark.settings import Settings
from tidemark.state.audit import AuditLog
from tidemark.state.commitlog import CommitLog
from tidemark.state.mode import TableWriter
from tidemark.stream.runner import run_stream
from tidemark.stream.status import StreamError, StreamStatus
from tidemark_dev.generator import create_topic, events, produce

pytestmark = pytest.mark.integration


def test_a_dirty_micro_batch_stops_the_stream_until_resolved_then_it_goes_on(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, own = fresh_table(settings, tmp_path, dirty__max_dirty_ratio=0.05)
    table = config.table
    create_topic(broker, table, 1)
    delivered = produce(broker, table, events(40, start=START, partitions=1, dirty_fraction=0.5))
    TableWriter(own.state_dir, table).switch("stream", by="test", reason="test", at=PROCESSING.isoformat())

    def stream() -> dict[str, Any]:
        return run_stream(
            spark,
            config,
            own,
            "stream-1",
            clock=lambda: PROCESSING,
            until_caught_up=True,
            trigger_interval_s=0.5,
        )

    with pytest.raises(StreamError, match=r"max_dirty_ratio.*tidemark resolve --table"):
        stream()
    status = StreamStatus(own.state_dir, table).read()
    assert status is not None and status["state"] == "failed" and "DirtyRatioExceeded" in status["message"]
    log = CommitLog(own.state_dir, table)
    assert log.state().batches == 0 and log.pending_plan(log.state()) is not None  # nothing committed

    resolve(config, own, action="accept", reason="known bad producer, INC-7", by="ann", at=PROCESSING)
    result = stream()
    assert "caught up" in result["reason"]
    rows, dirty, _ = landed(own, table)
    assert rows + dirty == Counter((p, o) for p, o, _ in delivered)
    assert len(dirty) > 0.05 * len(delivered)
    assert [r.action for r in AuditLog(own.state_dir, table).records()] == ["switch_to_stream", "accept"]
