"""Crash injection inside sealing: the real seal job (spark_jobs/seal.py in its own process)
is killed mid-compaction, then after registration (before _SUCCESS), then run again: the hour is
sealed exactly once with exact rows, no duplicate or stray file, one journal entry."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tests.helpers.jobs import JOBS, job_env
from tests.helpers.tables import fresh_table
from tidemark.faults import EXIT_CODE, SEAL_POINTS
from tidemark.ingest.dump import run_dump
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.e2e

DAY = datetime(2026, 11, 22, tzinfo=UTC)


def seal_process(
    settings: Settings, table: str, run_id: str, fail_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(JOBS / "seal.py"), "--table", table, "--run-id", run_id]
    env = job_env(settings, fail_at)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_seal_killed_at_every_point_in_turn_is_finished_by_its_retries(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """Each attempt is killed at the next point (after recovering what the one before left);
    the last one finishes."""
    home = tmp_path / "home"  # own Derby: the in-process session holds the shared one
    own = replace(settings, home=home, warehouse=str(home / "warehouse"))
    config, own = fresh_table(own, tmp_path, output__target_file_size="1KiB")
    create_topic(broker, config.source.topic, 1)
    times = [DAY + timedelta(hours=10, minutes=m) for m in range(0, 60, 2)] + [
        DAY + timedelta(hours=11, minutes=30)
    ]
    produce(broker, config.source.topic, records([(0, t) for t in times]))
    run_dump(spark, config, own, "run-1", DAY + timedelta(hours=12))

    for point in SEAL_POINTS:
        crashed = seal_process(own, config.table, "run-1", fail_at=point)
        assert crashed.returncode == EXIT_CODE, f"{point}: {crashed.stderr[-2000:]}"
    retried = seal_process(own, config.table, "run-1")
    assert retried.returncode == 0, retried.stderr[-2000:]
    assert '"sealed": ["2026-11-22T10"]' in retried.stdout

    layout = Layout(own, config.table)
    hour_dir = layout.table_dir / "dt=2026-11-22/hr=10"
    files = sorted(hour_dir.rglob("*.parquet"))
    assert len(files) > 1  # 1 KiB target: compaction split the hour into several files
    rows = [r for f in files for r in pq.read_table(f, columns=["_mq_offset"]).column(0).to_pylist()]
    assert sorted(rows) == list(range(30))  # exactly the 30 records of hour 10, once each
    assert (hour_dir / "_SUCCESS").exists()
    assert not (layout.open_dir / "dt=2026-11-22/hr=10").exists()
    assert not list(layout.staging_root.rglob("*.parquet"))
    entries = list(HourJournal(own.state_dir, config.table).entries())
    assert [(e.hour, e.kind, e.rows, len(e.files)) for e in entries] == [
        ("2026-11-22T10", "seal", 30, len(files))
    ]
