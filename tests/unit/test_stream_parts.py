"""Pure parts of the continuous writer: where a micro-batch may end, the plan's caps, the
writer mode, and the stream sensor's verdicts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tidemark.airflow.stream import watch_verdict
from tidemark.config import parse_table
from tidemark.errors import WriterModeError
from tidemark.ingest.planner import capped_offsets
from tidemark.state.audit import AuditLog
from tidemark.state.mode import TableWriter
from tidemark.stream.source import next_ends, offset_ends, stream_offset  # noqa: TID253

pytestmark = pytest.mark.unit

CONFIG = parse_table(
    {
        "table": "t",
        "source": {"topic": "t", "max_records_per_partition": 100},
        "schema": {"event_time": "timestamp not null"},
        "event_time": {"field": "event_time"},
    },
    "test",
)


def test_a_backlog_drains_in_micro_batches_capped_per_mq_partition() -> None:
    broker = {0: (0, 1000), 1: (0, 30)}
    first = next_ends(CONFIG, {}, broker, {})
    assert first == {0: 100, 1: 30}
    assert next_ends(CONFIG, {0: 100, 1: 30}, broker, first) == {0: 200, 1: 30}
    # a catch-up run never plans past the broker's ends at its start
    assert next_ends(CONFIG, {0: 950, 1: 30}, {0: (0, 5000), 1: (0, 90)}, {}, until={0: 1000, 1: 30}) == {
        0: 1000,
        1: 30,
    }


def test_offered_ends_never_go_back() -> None:
    # the commit log is behind what was offered (a micro-batch committed nothing): no going back
    assert next_ends(CONFIG, {0: 10}, {0: (0, 500)}, {0: 300}) == {0: 300}


def test_the_offset_round_trips_through_the_checkpoint_json() -> None:
    offset = stream_offset({1: 5, 0: 7}, 3)
    assert offset == {"ends": {"0": 7, "1": 5}, "tick": 3}
    assert offset_ends(offset) == {0: 7, 1: 5}
    assert offset_ends(None) == {}


def test_a_cap_behind_the_commit_log_reads_nothing_and_a_missing_partition_stays() -> None:
    capped = capped_offsets({0: (0, 100), 1: (0, 50), 2: (5, 9)}, {0: 40, 1: 10}, {0: 20, 1: 30})
    assert capped == {0: (0, 40), 1: (0, 30), 2: (5, 5)}


def test_only_the_tables_writer_passes_and_a_switch_is_audited(tmp_path: Path) -> None:
    writer = TableWriter(tmp_path, "t")
    writer.require("batch")  # the default
    with pytest.raises(WriterModeError, match="tidemark switch --table t --to stream"):
        writer.require("stream")
    mode, changed = writer.switch("stream", by="ann", reason="fresher", at="2026-11-24T08:00:00+00:00")
    assert changed and mode.mode == "stream" and writer.current() == mode
    assert writer.switch("stream", by="bob", reason="again", at="x") == (mode, False)
    with pytest.raises(WriterModeError):
        writer.require("batch")
    (record,) = AuditLog(tmp_path, "t").records()
    assert (record.action, record.by, record.reason, record.seq) == (
        "switch_to_stream",
        "ann",
        "fresher",
        mode.audit_seq,
    )


T0 = datetime(2026, 11, 24, 8, tzinfo=UTC)
STALE = timedelta(minutes=2)


def health(
    mode: str = "stream", state: str = "running", beat: datetime | None = T0, **extra: Any
) -> dict[str, Any]:
    age = (T0 + timedelta(seconds=30) - beat).total_seconds() if beat else None
    return {
        "mode": mode,
        "state": state,
        "alive": age is not None and age <= STALE.total_seconds(),
        "unannounced": [],
        "status": {"heartbeat_at": beat.isoformat()} if beat else {},
        **extra,
    }


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (health(), None),  # running, fresh: keep watching
        (health(unannounced=["2026-11-24T06"]), "hours_to_announce"),
        (health(state="failed"), "failed"),
        (health(beat=T0 - timedelta(minutes=5)), None),  # an older record: not started yet, within grace
        (health(mode="batch"), None),  # handed back, still finishing its micro-batch
        (health(mode="batch", state="stopped", unannounced=["h"]), "stopped"),
        (health(mode="batch", beat=T0 - timedelta(minutes=9)), "stopped"),  # died: its record went silent
    ],
)
def test_the_watch_ends_on_what_needs_a_task(case: dict[str, Any], expected: str | None) -> None:
    since = T0 - timedelta(seconds=10)
    assert (
        watch_verdict(
            case,
            since=since,
            now=T0 + timedelta(seconds=30),
            until=T0 + timedelta(hours=1),
            stale_after=STALE,
        )
        == expected
    )


def test_a_stream_that_never_writes_or_goes_silent_fails_the_watch() -> None:
    since = T0 - timedelta(minutes=10)
    late = T0 + timedelta(seconds=30)
    never = health(beat=T0 - timedelta(minutes=20))
    assert watch_verdict(never, since=since, now=late, until=late + STALE, stale_after=STALE) == "not_started"
    silent = health(beat=T0 - timedelta(minutes=5), state="running")
    silent["alive"] = False
    assert (
        watch_verdict(
            silent, since=T0 - timedelta(minutes=6), now=late, until=late + STALE, stale_after=STALE
        )
        == "silent"
    )
    assert watch_verdict(health(), since=since, now=late, until=late, stale_after=STALE) == "timed_out"
