"""The CLI runs its Spark jobs with the venv's own interpreter and Spark home, whatever PATH
holds: called by its path from cron or systemd (PATH without the venv, no SPARK_HOME, no
PYSPARK_PYTHON), `tidemark dump` still commits the batch, and `tidemark replay` (its own
Spark job) replays the batch's dirty records, audited."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.tables import START, fresh_table, landed
from tidemark.settings import Settings
from tidemark.state.audit import AuditLog
from tidemark.state.commitlog import CommitLog
from tidemark_dev.generator import create_topic, events, produce

pytestmark = pytest.mark.e2e


def test_cli_dump_called_by_path_without_the_venv_on_path(
    broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, dirty__max_dirty_ratio=0.5)
    create_topic(broker, config.source.topic, 2)
    delivered = produce(
        broker, config.source.topic, events(50, start=START, partitions=2, dirty_fraction=0.2)
    )
    cli = Path(sys.executable).parent / "tidemark"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PATH", "SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")
    }
    env.update(
        PATH="/usr/bin:/bin",  # a cron job's PATH: python3 here has no pyspark
        TIDEMARK_HOME=str(settings.home),
        TIDEMARK_CONF_DIR=str(settings.conf_dir),
        TIDEMARK_KAFKA_BOOTSTRAP=settings.kafka_bootstrap,
    )
    done = subprocess.run(
        [
            str(cli),
            "dump",
            "--table",
            config.table,
            "--run-id",
            "cron__1",
            "--processing-time",
            "2026-11-22T12:00Z",
        ],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows, dirty, _ = landed(settings, config.table)
    assert sum((rows + dirty).values()) == len(delivered) and dirty

    replay = [str(cli), "replay", "--table", config.table, "--reason", "after the fix", "--by", "cron"]
    done = subprocess.run(replay, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    commit = CommitLog(settings.state_dir, config.table).commit(1)
    assert commit is not None and commit.replayed_batches == (0,) and commit.dirty == sum(dirty.values())
    after_rows, after_dirty, _ = landed(settings, config.table)
    assert (after_rows, after_dirty) == (rows, dirty)  # nothing was fixed: they stay dirty, once
    (record,) = AuditLog(settings.state_dir, config.table).records()
    assert (record.action, record.by, record.reason) == ("replay", "cron", "after the fix")
