"""No rewrite of what is already right: an hour whose batch files are near the target size
and written in the table's sealed format becomes its version as they are (a hard link, not a
rewrite), on the real broker, Spark and the metastore: every row once, every value as
Spark reads it back, the default checks judged, a kill before the version's marker
recovered by the retry; a file the seal would write otherwise (another compression) is
rewritten; an Iceberg table's hour adopts its files too."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tests.helpers.iceberg import pyiceberg_rows, spark_rows
from tests.helpers.jobs import seal_killed_at
from tests.helpers.tables import at, fresh_table, landed
from tidemark.config import TableConfig
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

HOUR = "2026-11-22T10"


def dumped_hour(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, **overrides: Any
) -> tuple[TableConfig, Settings, list[Any], list[Path]]:
    """A table whose hour 10 is two batch files (two MQ partitions) of 200 events each, and
    a record of hour 12 in each that makes it due; its config's target file size then set to the
    files' mean size, as a table whose batches fill about one file an hour would have."""
    config, settings = fresh_table(settings, tmp_path, **overrides)
    create_topic(broker, config.source.topic, 2)
    events = [(p, at(10, m % 60)) for p in (0, 1) for m in range(200)]
    sent = produce(broker, config.source.topic, records([*events, (0, at(12, 30)), (1, at(12, 30))]))
    run_dump(spark, config, settings, "run-1", at(13))
    files = sorted((Layout(settings, config.table).open_dir / "dt=2026-11-22" / "hr=10").rglob("*.parquet"))
    assert len(files) == 2, files
    target = sum(f.stat().st_size for f in files) // 2
    output = config.output.model_copy(update={"target_file_size": target})
    return config.model_copy(update={"output": output}), settings, sent, files


def test_an_hour_of_files_near_the_target_is_adopted_as_it_is(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, caplog: Any
) -> None:
    config, settings, sent, batch_files = dumped_hour(spark, broker, settings, tmp_path)
    inodes = {f.stat().st_ino for f in batch_files}
    with caplog.at_level(logging.INFO, logger="tidemark.seal.compaction"):
        assert HOUR in run_seal(spark, config, settings, "run-1").sealed
    assert any(f"hour {HOUR} adopts its 2 batch files" in r.getMessage() for r in caplog.records)
    assert not any(f"hour {HOUR} compacted" in r.getMessage() for r in caplog.records)

    entry = HourJournal(settings.state_location, config.table).state().hours[HOUR]
    warehouse = Layout(settings, config.table).warehouse
    sealed = [warehouse / f for f in entry.files]
    assert {f.stat().st_ino for f in sealed} == inodes  # the very files the dump wrote
    assert sorted(f.name for f in sealed) == ["part-00000.parquet", "part-00001.parquet"]
    assert entry.rows == 400 and entry.quality["status"] == "passed" and entry.quality["evaluated"] == 4
    schema = pq.ParquetFile(sealed[0]).schema
    assert schema.column(schema.names.index("event_time")).physical_type == "INT96"  # Hive's readers

    # Spark reads through the metastore every event once, its instant to the microsecond
    rows = spark.sql(f"SELECT event_id, event_time FROM `{config.table}` WHERE hr = '10'").collect()
    produced = {json.loads(m.value)["event_id"]: json.loads(m.value)["event_time"] for _, _, m in sent}
    assert Counter(r["event_id"] for r in rows) == Counter(k for k, t in produced.items() if "T10:" in t)
    assert all(r["event_time"].isoformat().startswith(produced[r["event_id"]][:19]) for r in rows)
    landed_rows, dirty, _ = landed(settings, config.table)
    assert landed_rows == Counter((p, o) for p, o, _ in sent) and not dirty


def test_a_kill_before_the_adopted_versions_marker_is_recovered_by_the_retry(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: Any
) -> None:
    config, settings, sent, _ = dumped_hour(spark, broker, settings, tmp_path)
    seal_killed_at(spark, config, settings, monkeypatch, "mid_compaction")
    assert (
        HOUR in run_seal(spark, config, settings, "run-1").sealed
    )  # linked again over the first attempt's links
    entry = HourJournal(settings.state_location, config.table).state().hours[HOUR]
    assert entry.rows == 400 and len(entry.files) == 2
    landed_rows, _, _ = landed(settings, config.table)
    assert landed_rows == Counter((p, o) for p, o, _ in sent)


def test_files_of_another_compression_than_the_tables_are_rewritten(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, caplog: Any
) -> None:
    config, settings, _, batch_files = dumped_hour(spark, broker, settings, tmp_path)
    inodes = {f.stat().st_ino for f in batch_files}
    output = config.output.model_copy(update={"compression": "zstd"})  # changed after the dump
    with caplog.at_level(logging.INFO, logger="tidemark.seal.compaction"):
        assert HOUR in run_seal(spark, config.model_copy(update={"output": output}), settings, "run-1").sealed
    assert any(f"hour {HOUR} compacted 2 batch files" in r.getMessage() for r in caplog.records)
    entry = HourJournal(settings.state_location, config.table).state().hours[HOUR]
    sealed = [Layout(settings, config.table).warehouse / f for f in entry.files]
    assert entry.rows == 400  # by Spark, at two files' worth of the target
    assert {pq.ParquetFile(f).metadata.row_group(0).column(0).compression for f in sealed} == {"ZSTD"}
    assert not {os.stat(f).st_ino for f in sealed} & inodes  # new files, written by the seal


def test_an_iceberg_tables_hour_adopts_its_files_in_its_snapshot(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, caplog: Any
) -> None:
    config, settings, sent, batch_files = dumped_hour(
        spark, broker, settings, tmp_path, output__table_format="iceberg"
    )
    inodes = {f.stat().st_ino for f in batch_files}
    with caplog.at_level(logging.INFO, logger="tidemark.seal.compaction"):
        assert HOUR in run_seal(spark, config, settings, "run-1").sealed
    assert any(f"hour {HOUR} adopts its 2 batch files" in r.getMessage() for r in caplog.records)
    entry = HourJournal(settings.state_location, config.table).state().hours[HOUR]
    warehouse = Layout(settings, config.table).warehouse
    assert {(warehouse / f).stat().st_ino for f in entry.files} == inodes
    schema = pq.ParquetFile(warehouse / entry.files[0]).schema
    assert schema.column(schema.names.index("event_time")).physical_type == "INT64"  # Iceberg's spec
    expected = {(p, o): json.loads(m.value)["event_id"] for p, o, m in sent if p is not None}
    expected = {k: v for k, v in expected.items() if k in {(p, o) for p, o, m in sent if b"T10:" in m.value}}
    assert pyiceberg_rows(settings, config.table, hour="10") == expected
    assert spark_rows(settings, config.table, hour="10") == expected
