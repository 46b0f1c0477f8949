"""Crash injection: the real dump job (spark_jobs/dump.py in its own process) is killed at each
named point, then retried with the same run id: exactly N records, no duplicate, no orphan file.
Also: two processes with one run id at once, and a broker that is down."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers.jobs import job_process
from tests.helpers.tables import PROCESSING, START, fresh_table, landed
from tidemark.faults import DUMP_POINTS, EXIT_CODE
from tidemark.ingest.kafka import client_properties, group_offsets
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.layout import Layout
from tidemark_dev.generator import create_topic, events, produce
from tidemark_dev.net import free_port

pytestmark = pytest.mark.e2e


def dump_process(
    settings: Settings, table: str, run_id: str, fail_at: str | None = None
) -> subprocess.Popen[str]:
    return job_process(
        settings, "dump", table, run_id, "--processing-time", PROCESSING.isoformat(), fail_at=fail_at
    )


def run(settings: Settings, table: str, run_id: str, fail_at: str | None = None) -> tuple[int, str, str]:
    proc = dump_process(settings, table, run_id, fail_at)
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, err


def assert_exact(settings: Settings, table: str, delivered: Sequence[tuple[int, int, object]]) -> None:
    rows, dirty, _ = landed(settings, table)
    assert rows + dirty == Counter((p, o) for p, o, _ in delivered)
    layout = Layout(settings, table)
    on_disk = {
        str(p.relative_to(layout.warehouse))
        for d in (layout.table_dir, layout.dirty_dir, layout.late_dir)
        for p in d.rglob("*.parquet")
    }
    committed = {f for c in CommitLog(settings.state_dir, table).iter_commits() for f in c.files}
    assert on_disk == committed, f"orphans: {on_disk - committed}, missing: {committed - on_disk}"


def test_a_dump_killed_at_every_point_in_turn_is_finished_by_its_retries(
    broker: str, settings: Settings, tmp_path: Path
) -> None:
    """One batch killed at each point before its commit record in turn (every attempt
    recovers what the one before left, then dies at the next point), then finished; two more
    batches killed after theirs, each retried. Exact after each, nothing visible uncommitted."""
    config, settings = fresh_table(settings, tmp_path)
    table = config.table
    create_topic(broker, config.source.topic, 4)
    delivered = produce(broker, config.source.topic, events(400, start=START, dirty_fraction=0.02))
    layout = Layout(settings, table)
    first_committed = DUMP_POINTS.index("before_commit_record") + 1
    for point in DUMP_POINTS[:first_committed]:
        code, _, err = run(settings, table, "scheduled__crash", fail_at=point)
        assert code != 0, f"no crash at {point}"
        if point != "mid_read":  # a read task's crash fails the driver's pool of tasks instead
            assert code == EXIT_CODE, err[-2000:]
        visible = [p for d in (layout.dirty_dir, layout.late_dir) for p in d.rglob("*.parquet")]
        assert not visible, f"visible before the commit record after a kill at {point}: {visible}"
        assert CommitLog(settings.state_dir, table).state().batches == 0
    code, out, err = run(settings, table, "scheduled__crash")
    assert code == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert (result["status"], result["read"]) == ("committed", 400)
    assert result["spark_started"] is False  # a local master's read tasks run without a JVM
    assert_exact(settings, table, delivered)

    for batch, point in enumerate(DUMP_POINTS[first_committed:], start=1):
        delivered += produce(broker, config.source.topic, events(40, start=START, seed=10 + batch))
        run_id = f"scheduled__crash-{batch}"
        code, _, err = run(settings, table, run_id, fail_at=point)
        assert code == EXIT_CODE, err[-2000:]
        code, out, err = run(settings, table, run_id)
        assert code == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert (result["status"], result["read"]) == ("already_committed", 40)
        assert_exact(settings, table, delivered)
    # the retries still brought lag monitoring up to date

    conf = client_properties(settings.kafka_bootstrap, {})
    assert group_offsets(conf, config.consumer_group, config.source.topic, [0, 1, 2, 3]) == {
        p: 120 for p in range(4)
    }


def test_two_processes_same_run_id(broker: str, settings: Settings, tmp_path: Path) -> None:
    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 4)
    delivered = produce(broker, config.source.topic, events(200, start=START))
    procs = [dump_process(settings, config.table, "manual__twice") for _ in range(2)]
    outcomes = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in outcomes)
    statuses = [json.loads(out.strip().splitlines()[-1])["status"] for code, out, _ in outcomes if code == 0]
    # Either one fails cleanly on the batch lock, or the second ran after the first committed.
    if codes == [0, 0]:
        assert sorted(statuses) == ["already_committed", "committed"]
    else:
        assert codes[0] == 0 and statuses == ["committed"]
        loser = next(err for code, _, err in outcomes if code != 0)
        assert "another job holds the batch lock" in loser
    assert CommitLog(settings.state_dir, config.table).state().batches == 1
    assert_exact(settings, config.table, delivered)


def test_broker_down_fails_clearly_and_commits_nothing(settings: Settings, tmp_path: Path) -> None:
    config, settings = fresh_table(settings, tmp_path)

    dead = replace(settings, kafka_bootstrap=f"127.0.0.1:{free_port()}")
    code, _, err = run(dead, config.table, "r1")
    assert code != 0
    assert f"broker not reachable at {dead.kafka_bootstrap}" in err
    assert CommitLog(settings.state_dir, config.table).state().batches == 0
