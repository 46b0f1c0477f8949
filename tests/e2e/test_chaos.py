"""Chaos, not only named crash points: dump and seal jobs (real spark-submit-style processes)
are killed with SIGKILL at random moments, interleaved with new data, late data and further
runs, some retried under another run id. Seeded and bounded. At the end, every produced
(MQ partition, offset) is exactly once in rows + dirty + late, every sealed hour holds the
rows its journal entry says, and no orphan or temp file is visible in any table directory."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.helpers.jobs import job_process
from tests.helpers.tables import PROCESSING, START, fresh_table, landed, late_landed
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark_dev.generator import create_topic, events, produce, records

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("TIDEMARK_CHAOS_SEED", "20261123"))
ROUNDS = int(os.environ.get("TIDEMARK_CHAOS_ROUNDS", "2"))  # 2 in the suite (late data from the second on)


def job(settings: Settings, name: str, table: str, run_id: str, *extra: str) -> subprocess.Popen[str]:
    return job_process(settings, name, table, run_id, *extra)


def killed_at_random(proc: subprocess.Popen[str], rng: random.Random, upto: float) -> bool:
    """SIGKILL the job's whole process group after a random delay; False if it ended first."""
    deadline = time.monotonic() + rng.uniform(0.5, upto)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            proc.communicate()
            return False
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    return True


def finish(settings: Settings, name: str, table: str, run_id: str, *extra: str) -> None:
    proc = job(settings, name, table, run_id, *extra)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{name} {run_id} failed after chaos:\n{err[-4000:]}"


def test_random_kills_of_dump_and_seal_lose_and_double_nothing(
    broker: str, settings: Settings, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    home = tmp_path / "home"  # its own Derby: the in-process Spark of other tests holds the shared one
    own = replace(settings, home=home, warehouse=str(home / "warehouse"))
    config, own = fresh_table(own, tmp_path, dirty__max_dirty_ratio=0.5)
    create_topic(broker, config.source.topic, 3)
    produced: list[tuple[int, int, Any]] = []
    kills = 0
    for r in range(ROUNDS):
        hour = START + timedelta(hours=r)
        produced += produce(
            broker,
            config.source.topic,
            events(90, start=hour, partitions=3, seed=SEED + r, dirty_fraction=0.05),
        )
        if r:  # late data: records of the first hour, sealed by now
            produced += produce(
                broker,
                config.source.topic,
                records([(r % 3, START + timedelta(minutes=7 * r))], prefix=f"late{r}"),
            )
        processing = (PROCESSING + timedelta(hours=r)).isoformat()
        run_id = f"chaos-{r}"
        kills += killed_at_random(
            job(own, "dump", config.table, run_id, "--processing-time", processing), rng, 14.0
        )
        if rng.random() < 0.5:  # the retry under another run id completes the same pending batch
            run_id = f"chaos-{r}-retry"
        finish(own, "dump", config.table, run_id, "--processing-time", processing)
        kills += killed_at_random(job(own, "seal", config.table, f"seal-{r}"), rng, 16.0)
        finish(own, "seal", config.table, f"seal-{r}" if rng.random() < 0.5 else f"seal-{r}-retry")
    assert kills >= 2, f"the seed killed only {kills} jobs; chaos needs kills"

    # every produced offset exactly once in rows + dirty + late
    rows, dirty, _ = landed(own, config.table)
    late = late_landed(own, config.table)
    assert rows + dirty + late == Counter((p, o) for p, o, _ in produced)
    # every sealed hour holds the rows its journal entry says, in the files it names
    layout = Layout(own, config.table)
    journal = HourJournal(own.state_dir, config.table).state()
    assert journal.hours, "nothing was sealed"
    for key, entry in journal.hours.items():
        files = sorted(entry.files)
        on_disk = sorted(
            layout.relative(p) for p in (layout.table_dir / f"dt={key[:10]}/hr={key[11:]}").rglob("*.parquet")
        )
        assert on_disk == files, (key, on_disk, files)
        assert sum(pq.read_metadata(layout.warehouse / f).num_rows for f in files) == entry.rows
    # no orphan or temp file in any table directory
    committed = {f for c in CommitLog(own.state_dir, config.table).iter_commits() for f in c.files}
    sealed = {f for e in journal.hours.values() for f in e.files}
    for directory in (layout.table_dir, layout.late_dir, layout.dirty_dir):
        for path in directory.rglob("*"):
            if path.is_dir():
                continue
            name = path.name
            assert not name.startswith(".") and "tmp" not in name, f"temp file visible: {path}"
            if name.endswith(".parquet"):
                assert layout.relative(path) in committed | sealed, f"orphan file: {path}"
