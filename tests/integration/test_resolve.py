"""A stuck batch always has a way out, recorded: a batch the dirty gate refuses fails on every
run (each run completes the pending batch first) until an operator decides to accept it, skip
its offsets as a recorded gap, or replan; each decision leaves an audit record that status
shows, and the table goes on exactly once."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import PROCESSING, START, fresh_table, landed
from tidemark.config import load_table_file
from tidemark.errors import DirtyRatioExceededError, ResolveError
from tidemark.ingest.dump import run_dump
from tidemark.ingest.resolve import resolve
from tidemark.observe.report import render_report, report_data
from tidemark.observe.status import render, table_status
from tidemark.settings import Settings
from tidemark.state.audit import AuditLog
from tidemark.state.commitlog import CommitLog
from tidemark_dev.generator import create_topic, events, produce

pytestmark = pytest.mark.integration

DECIDED_AT = datetime(2026, 11, 22, 13, 0, tzinfo=UTC)


def stuck_table(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> tuple[Any, Settings, list[Any]]:
    """A table whose pending batch is 50% dirty: it fails on every run."""
    config, settings = fresh_table(settings, tmp_path, dirty__max_dirty_ratio=0.05)
    create_topic(broker, config.source.topic, 2)
    delivered = produce(
        broker, config.source.topic, events(40, start=START, partitions=2, dirty_fraction=0.5)
    )
    for run in ("run-1", "run-2"):
        with pytest.raises(DirtyRatioExceededError, match="tidemark resolve --table"):
            run_dump(spark, config, settings, run, PROCESSING)
    assert CommitLog(settings.state_dir, config.table).state().last_committed == -1
    return config, settings, delivered


def test_accept_commits_the_refused_batch_once_and_is_audited(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings, delivered = stuck_table(spark, broker, settings, tmp_path)
    with pytest.raises(ResolveError, match="say why"):
        resolve(config, settings, action="accept", reason=" ", by="ops", at=DECIDED_AT)
    record = resolve(
        config, settings, action="accept", reason="known bad producer, INC-7", by="ops", at=DECIDED_AT
    )
    assert (record.action, record.batch_id, record.by) == ("accept", 0, "ops")
    done = run_dump(spark, config, settings, "run-2", PROCESSING)
    assert done.status == "committed" and done.read == 40
    rows, dirty, _ = landed(settings, config.table)
    assert rows + dirty == Counter((p, o) for p, o, _ in delivered)
    status = table_status(config, settings)
    assert (
        status["pending_batch"] is None
        and "accept batch 0 by ops: known bad producer, INC-7" in status["decisions"][0]
    )
    assert "decision #0" in render(status)


def test_skip_records_a_gap_and_the_table_goes_on(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings, _ = stuck_table(spark, broker, settings, tmp_path)
    # a decision made by a run is applied once: its retry finds it done
    first = resolve(
        config, settings, action="skip", reason="poison range", by="airflow", at=DECIDED_AT, run_id="m1"
    )
    again = resolve(
        config, settings, action="skip", reason="poison range", by="airflow", at=DECIDED_AT, run_id="m1"
    )
    assert first == again and len(list(AuditLog(settings.state_dir, config.table).records())) == 1
    log = CommitLog(settings.state_dir, config.table)
    closed = log.commit(0)
    assert closed is not None and closed.rows == 0 and closed.files == ()
    assert {(r.mq_partition, r.gap_from, r.gap_to) for r in closed.ranges} == {(0, 0, 20), (1, 0, 20)}
    # the runs bound to the closed batch are no-ops; new data lands in the next batch
    assert run_dump(spark, config, settings, "run-2", PROCESSING).status == "already_committed"
    more = produce(broker, config.source.topic, events(20, start=START, partitions=2, seed=3))
    nxt = run_dump(spark, config, settings, "run-3", PROCESSING)
    assert (nxt.batch_id, nxt.read, nxt.dirty) == (1, 20, 0)
    rows, dirty, _ = landed(settings, config.table)
    assert rows + dirty == Counter((p, o) for p, o, _ in more)
    with pytest.raises(ResolveError, match="no pending batch"):
        resolve(config, settings, action="skip", reason="again", by="ops", at=DECIDED_AT)


def test_replan_closes_the_plan_reading_nothing_and_the_next_run_plans_afresh(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings, delivered = stuck_table(spark, broker, settings, tmp_path)
    resolve(config, settings, action="replan", reason="gate raised for this topic", by="ops", at=DECIDED_AT)
    # the operator fixes the gate in the YAML; the next run plans the same offsets afresh
    path = settings.conf_dir / f"{config.table}.yaml"
    path.write_text(path.read_text().replace("max_dirty_ratio: 0.05", "max_dirty_ratio: 0.6"))
    fixed = load_table_file(path)
    done = run_dump(spark, fixed, replace(settings), "run-4", PROCESSING)
    assert (done.batch_id, done.read) == (1, 40)
    rows, dirty, _ = landed(settings, config.table)
    assert rows + dirty == Counter((p, o) for p, o, _ in delivered)


def test_the_health_page_shows_the_pending_batch_and_the_decisions(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings, _ = stuck_table(spark, broker, settings, tmp_path)
    page = render_report(report_data(config, settings, as_of=DECIDED_AT))
    assert 'id="pending"' in page and "batch 0" in page
    resolve(config, settings, action="skip", reason="poison range, INC-9", by="ops", at=DECIDED_AT)
    page = render_report(report_data(config, settings, as_of=DECIDED_AT))
    assert 'id="pending"' not in page and "skip batch 0 by ops: poison range, INC-9" in page
