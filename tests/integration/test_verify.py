"""``tidemark verify``: a sealed and amended Hive table passes every check; each way a table can
be corrupted (a stray file, an hour whose files disagree with its journal, a file read through
two partitions, overlapping or holed offsets in the commit log) is named by its check, and the
job exits non-zero with the verdict."""

from __future__ import annotations

import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import at, fresh_table
from tidemark.errors import LakeCheckError
from tidemark.ingest.dump import run_dump
from tidemark.observe.verify import run_verify
from tidemark.seal.metastore import HiveClientMetastore
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.batches import Commit, MqPartitionStats, MqRange, Plan
from tidemark.state.commitlog import CommitLog
from tidemark.state.layout import Layout
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

NOW = datetime.now(UTC)  # orphans are judged against the files' real times


def _failures(spark: Any, config: Any, settings: Settings) -> dict[str, list[str]]:
    """Check name -> problems of each failing check (the job's LakeCheckError carries them)."""
    with pytest.raises(LakeCheckError) as failed:
        run_verify(spark, config, settings, NOW)
    text = str(failed.value)
    assert config.table in text and "VIOLATIONS FOUND" in text
    found: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.strip().startswith("FAIL "):
            current = line.split()[1]
            found[current] = []
        elif line.strip().startswith("- ") and current:
            found[current].append(line.strip()[2:])
        elif line.strip().startswith("PASS "):
            current = ""
    return found


def test_a_sealed_and_amended_table_passes_and_each_corruption_is_named(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, late_policy="amend")
    topic = config.source.topic
    create_topic(broker, topic, 2)
    produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)]))
    produce(broker, topic, records([(0, at(11, 50)), (1, at(11, 45))], prefix="b"))
    run_dump(spark, config, settings, "run-1", at(12))
    assert run_seal(spark, config, settings, "run-1").sealed == ["2026-11-22T10"]
    produce(broker, topic, records([(0, at(10, 30)), (1, at(12, 40)), (0, at(12, 45))], prefix="late"))
    run_dump(spark, config, settings, "run-2", at(13))
    run_seal(spark, config, settings, "run-2")  # amends hour 10 with its late row, seals 11

    verdict = run_verify(spark, config, settings, NOW)
    assert verdict.ok, verdict.render()
    checked = {c.name: c.checked for c in verdict.checks}
    assert list(checked) == ["offsets", "files_referenced_once", "hour_rows", "orphans"]
    assert checked["offsets"] >= 4 and checked["files_referenced_once"] >= 2 and checked["hour_rows"] == 2

    layout = Layout(settings, config.table)
    hour_dir = layout.table_dir / "dt=2026-11-22" / "hr=10"
    one_file = sorted(hour_dir.glob("*.parquet"))[0]

    stray = layout.table_dir / "leftover" / "part-0.parquet"  # a stray file, a day old
    stray.parent.mkdir()
    shutil.copy(one_file, stray)
    day_ago = time.time() - 86_400 * 30
    os.utime(stray, (day_ago, day_ago))
    assert list(_failures(spark, config, settings)) == ["orphans"]
    shutil.rmtree(stray.parent)

    extra = hour_dir / "part-copy.parquet"  # the hour's files no longer hold its journal's rows
    shutil.copy(one_file, extra)
    (problem,) = _failures(spark, config, settings)["hour_rows"]
    assert "hour 2026-11-22T10" in problem and "journal entry says" in problem
    extra.unlink()

    metastore = HiveClientMetastore(spark, config)  # one directory read through two partitions
    metastore.add_partitions(config.table, [({"dt": "2026-11-22", "hr": "13"}, f"file:{hour_dir}")])
    failures = _failures(spark, config, settings)
    assert set(failures) == {"files_referenced_once", "hour_rows"}
    assert all("read 2 times" in p for p in failures["files_referenced_once"])
    assert any("hour 2026-11-22T10" in p and "26 rows" in p for p in failures["hour_rows"])  # twice 13
    spark.sql(f"ALTER TABLE `{config.table}` DROP PARTITION (dt='2026-11-22', hr='13')")
    assert run_verify(spark, config, settings, NOW).ok

    log = CommitLog(settings.state_location, config.table)  # a batch that read offsets again
    state = log.state()
    overlap = (MqRange(0, state.end_offsets[0] - 2, state.end_offsets[0] + 1),)
    batch = state.last_committed + 1
    log.write_plan(Plan(config.table, batch, "run-x", topic, at(14).isoformat(), overlap))
    log.write_commit(
        Commit(
            config.table,
            batch,
            "run-x",
            "run-x",
            topic,
            at(14).isoformat(),
            overlap,
            (),
            {},
            (MqPartitionStats(0, 0, 0, 0),),
            0,
            0,
        )
    )
    (problem,) = _failures(spark, config, settings)["offsets"]
    assert f"batch {batch} MQ partition 0" in problem and "committed twice" in problem
