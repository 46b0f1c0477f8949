"""State records through both backends: the OS and the Hadoop FileSystem API of Spark's JVM
(here on ``file://``; the same calls serve ``hdfs://``), and a whole dump + seal cycle whose
commit log, journal and lock go through the Hadoop API."""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import fresh_table, landed
from tidemark.errors import BatchConflictError, StorageError
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.locks import TableLock
from tidemark.state.storage import HadoopStorage, LocalStorage, Location, Storage, storage_for
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

HOUR = datetime(2026, 11, 22, 10, tzinfo=UTC)


@pytest.fixture(params=["local", "hadoop"])
def storage(request: pytest.FixtureRequest, spark: Any) -> Storage:
    if request.param == "local":
        return LocalStorage()
    jsc = spark.sparkContext._jsc
    return HadoopStorage(spark.sparkContext._jvm, jsc.hadoopConfiguration())


def test_records_are_create_only_whole_and_replaceable(storage: Storage, tmp_path: Path) -> None:
    record = Location(f"file://{tmp_path}/log/commits/0000000000.json")
    assert storage.read(record) is None
    assert storage.create_only(record, b'{"batch": 0}')
    assert not storage.create_only(record, b'{"batch": "second writer"}')
    assert storage.read(record) == b'{"batch": 0}'
    storage.replace(record, b'{"batch": 1}')
    storage.replace(record, b'{"batch": 2}')
    assert storage.read(record) == b'{"batch": 2}'
    storage.delete(record)
    assert storage.read(record) is None
    leftovers = [p.name for p in (tmp_path / "log" / "commits").iterdir() if not p.name.endswith(".crc")]
    assert leftovers == []  # no temp files survive


def test_concurrent_writers_of_one_record_exactly_one_wins(storage: Storage, tmp_path: Path) -> None:
    record = Location(tmp_path / "runs" / "run-1.json")
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: storage.create_only(record, json.dumps({"w": i}).encode()), range(16)))
    assert won.count(True) == 1
    winner = won.index(True)
    assert json.loads(storage.read(record) or b"") == {"w": winner}


def test_s3a_state_is_refused_with_the_reason() -> None:
    with pytest.raises(StorageError, match="S3 rename is a copy"):
        storage_for(Location("s3a://bucket/tidemark/state"))


def test_location_keeps_uris_intact() -> None:
    loc = Location("hdfs://nn:8020/tidemark/state/") / "events" / "log"
    assert str(loc) == "hdfs://nn:8020/tidemark/state/events/log"
    assert loc.name == "log" and str(loc.parent) == "hdfs://nn:8020/tidemark/state/events"
    assert loc.scheme == "hdfs" and Location("/var/x").scheme == ""


def test_dump_and_seal_with_state_on_the_hadoop_api(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEMARK_STORAGE", "hadoop")
    config, settings = fresh_table(settings, tmp_path)
    settings = replace(settings, state_uri=f"file://{tmp_path}/hadoop-state")
    assert isinstance(storage_for(settings.state_location), HadoopStorage)
    create_topic(broker, config.source.topic, 1)
    delivered = produce(
        broker,
        config.source.topic,
        records(
            [(0, HOUR + timedelta(minutes=m)) for m in range(0, 60, 10)]
            + [(0, HOUR + timedelta(hours=1, minutes=30))]
        ),
    )
    first = run_dump(spark, config, settings, "run-1", HOUR + timedelta(hours=2))
    again = run_dump(spark, config, settings, "run-1", HOUR + timedelta(hours=2))
    assert (first.status, again.status) == ("committed", "already_committed")
    sealed = run_seal(spark, config, settings, "run-1")
    assert sealed.sealed == ["2026-11-22T10"]

    state_files = {
        p.relative_to(tmp_path / "hadoop-state").as_posix()
        for p in (tmp_path / "hadoop-state").rglob("*.json")
    }
    table = config.table
    assert {f"{table}/log/plans/0000000000.json", f"{table}/log/commits/0000000000.json"} <= state_files
    assert f"{table}/partitions/journal/0000000000.json" in state_files
    assert any(name.endswith(".crc") for name in (p.name for p in (tmp_path / "hadoop-state").rglob("*")))
    assert CommitLog(settings.state_location, table).state().rows == 7
    assert [e.hour for e in HourJournal(settings.state_location, table).entries()] == ["2026-11-22T10"]
    rows, _, _ = landed(settings, table)
    assert sum(rows.values()) == 7 and Counter((p, o) for p, o, _ in delivered) == rows
    with TableLock(settings.state_location, table).hold("a"), pytest.raises(BatchConflictError):
        run_dump(spark, config, settings, "run-2", HOUR + timedelta(hours=2))
