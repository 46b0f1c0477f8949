"""rebase: after OffsetsWentBackError, the MQ partitions a recreated or truncated topic lost
restart at the broker's earliest offsets, by a recorded decision (pure state, no broker)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.helpers.classify import events_config
from tidemark.cli import build_parser
from tidemark.errors import OffsetsWentBackError, ResolveError
from tidemark.ingest.planner import next_ranges
from tidemark.ingest.resolve import ACTIONS, resolve
from tidemark.settings import Settings
from tidemark.state.audit import AuditLog
from tidemark.state.batches import Commit, MqPartitionStats, MqRange, Plan
from tidemark.state.commitlog import CommitLog

pytestmark = pytest.mark.unit


def test_rebase_restarts_truncated_partitions_and_drops_vanished_ones(tmp_path: Path) -> None:
    config = events_config()
    settings = replace(Settings.from_env(), state_uri=str(tmp_path))
    log = CommitLog(settings.state_location, config.table)
    ranges = (MqRange(0, 0, 40), MqRange(1, 0, 30), MqRange(2, 0, 10))
    log.write_plan(Plan(config.table, 0, "r0", "events", "2026-11-22T12:00:00+00:00", ranges))
    log.write_commit(
        Commit(
            config.table,
            0,
            "r0",
            "r0",
            "events",
            "2026-11-22T12:00:00+00:00",
            ranges,
            (),
            {},
            tuple(MqPartitionStats(r.mq_partition, r.size, r.size, 0) for r in ranges),
            0,
            80,
        )
    )
    broker = {0: (0, 50), 1: (0, 5)}  # partition 1 truncated (recreated), partition 2 gone
    with pytest.raises(OffsetsWentBackError):
        next_ranges(config, log.state().end_offsets, broker)
    at = datetime(2026, 11, 22, 13, tzinfo=UTC)
    record = resolve(
        config, settings, action="rebase", reason="topic recreated", by="ops", at=at, broker_offsets=broker
    )
    assert record.detail["restarted"] == {1: 0} and record.detail["dropped"] == [2]
    state = log.state()
    assert state.end_offsets == {0: 40, 1: 0} and state.last_committed == 1
    assert next_ranges(config, state.end_offsets, broker) == [MqRange(0, 40, 50), MqRange(1, 0, 5)]
    assert [r.action for r in AuditLog(settings.state_location, config.table).records()] == ["rebase"]
    with pytest.raises(ResolveError, match="nothing to rebase"):
        resolve(config, settings, action="rebase", reason="again", by="ops", at=at, broker_offsets=broker)


def test_every_entry_point_offers_the_decisions_resolve_knows() -> None:
    """The CLI keeps its choices literal (no config import at start-up): they must match."""

    args = build_parser().parse_args(["resolve", "--table", "t", "--action", "rebase", "--reason", "r"])
    assert args.action == "rebase"

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices["resolve"]._actions if a.dest == "action")
    assert tuple(action.choices or ()) == ACTIONS
