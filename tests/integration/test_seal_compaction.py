"""The due hours of a seal run compacted together by pyarrow (in the driver, or in one Spark
job), each with its default checks in the same pass, against the real broker, Spark and the
metastore: every row once, every value as Spark reads it back (timestamps to the
microsecond, decimals, extra partition columns), an hour too big for one file compacted by
Spark beside them, a kill after the shared compaction recovered by the next run, and a
failing default check blocking its hour exactly as Spark's aggregation did."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from contextlib import nullcontext
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tests.helpers.jobs import seal_killed_at
from tests.helpers.tables import at, fresh_table, landed, registered
from tidemark.errors import QualityGateError, TidemarkError
from tidemark.ingest.dump import run_dump
from tidemark.lazy_session import LazySession
from tidemark.seal import hour_tasks
from tidemark.seal.hourfiles import HourFiles
from tidemark.seal.sealing import run_release, run_seal
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark.state.locks import Lease
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

MICROS = timedelta(microseconds=123_457)


def hours_of(spark: Any, table: str) -> dict[str, list[tuple[Any, ...]]]:
    spark.catalog.refreshTable(table)
    rows = spark.sql(f"SELECT hr, event_id, event_time, amount, app FROM `{table}`").collect()
    found: dict[str, list[tuple[Any, ...]]] = {}
    for r in rows:
        found.setdefault(r["hr"], []).append((r["event_id"], r["event_time"], r["amount"], r["app"]))
    return found


@pytest.mark.parametrize("where", ["forked processes", "driver", "driver threads", "spark job"])
def test_due_hours_are_compacted_together_and_read_back_exactly(
    where: str, spark: Any, broker: str, settings: Settings, tmp_path: Path, caplog: Any, monkeypatch: Any
) -> None:
    """On a local master whose session has not started (the seal's lazy one), the due hours
    are compacted in processes forked from the driver, the seal's warm-ups beside them; with
    a started session, small hours in the driver, past ``IN_DRIVER_BYTES`` by threads of the
    driver on a local master, by one Spark job on a cluster (both forced here): the same files
    every way."""
    if where in ("driver threads", "spark job"):
        monkeypatch.setattr(hour_tasks, "IN_DRIVER_BYTES", 0)
    if where == "spark job":
        monkeypatch.setattr(hour_tasks, "executors_share_the_driver", lambda context: False)
    config, settings = fresh_table(settings, tmp_path, partitioning__columns=["app"])
    create_topic(broker, config.source.topic, 2)
    times = [at(h, m) + MICROS for h in (9, 10, 11) for m in (5, 35)]
    sent = produce(
        broker,
        config.source.topic,
        records([(i % 2, t, {"app": "web" if i % 3 else "ios"}) for i, t in enumerate(times)])
        + records([(0, at(13)), (1, at(13))], prefix="edge"),
    )
    run_dump(spark, config, settings, "run-1", at(13, 30))
    # the seal's own session: lazy on local[2], started (as this one) when registering asks
    lazy: Any = LazySession("seal", lambda: spark, {"spark.master": "local[2]"})
    with caplog.at_level(logging.INFO, logger="tidemark.seal"):
        result = run_seal(lazy if where == "forked processes" else spark, config, settings, "run-1")
    assert result.sealed == [f"2026-11-22T{h}" for h in ("09", "10", "11")]  # ready 12:50
    shared = [
        r.getMessage() for r in caplog.records if "compact" in r.getMessage() and "hours" in r.getMessage()
    ]
    assert (
        shared[0]
        == f"{config.table}: compacting 3 hours together (2026-11-22T09, 2026-11-22T10, 2026-11-22T11)"
    )
    ending = {
        "forked processes": "compacted in 2 process(es) forked from the driver",
        "driver": "compacted in the driver (1 thread(s))",
        "driver threads": "compacted in the driver (2 thread(s))",
        "spark job": "compacted by one Spark job of 2 tasks",
    }
    assert shared[1].startswith("3 hours (") and shared[1].endswith(ending[where]), shared

    # Spark reads through the metastore exactly what was produced, each hour in its partitions
    found = hours_of(spark, config.table)
    assert {h: sorted(r[1] for r in rows) for h, rows in found.items()} == {
        f"{h:02d}": sorted(t.replace(tzinfo=None) for t in times if t.hour == h) for h in (9, 10, 11)
    }
    assert sorted(r[0] for rows in found.values() for r in rows) == sorted(
        f"r-{i}" for i in range(len(times))
    )
    assert sorted(r[3] for rows in found.values() for r in rows) == sorted(
        "web" if i % 3 else "ios" for i in range(len(times))
    )
    assert {r[2] for rows in found.values() for r in rows} == {Decimal("1.00")}
    assert "dt=2026-11-22/hr=10/app=web" in registered(spark, config.table)

    # one file per hour and app value, timestamps stored as Spark stores them; defaults judged
    layout = Layout(settings, config.table)
    journal = HourJournal(settings.state_location, config.table).state()
    for key in ("2026-11-22T09", "2026-11-22T10", "2026-11-22T11"):
        entry = journal.hours[key]
        assert entry.quality["status"] == "passed" and entry.quality["evaluated"] == 4
        per_app = Counter(Path(f).parent.name for f in entry.files)
        assert set(per_app.values()) == {1}, entry.files
        parquet = pq.ParquetFile(layout.warehouse / entry.files[0]).schema
        stored = {parquet.column(i).name: parquet.column(i).physical_type for i in range(len(parquet))}
        assert stored["event_time"] == "INT96"  # as Spark stores it: amends and rebuilds are Spark's
    rows, dirty, _ = landed(settings, config.table)  # the edge records wait in their batch files
    assert rows == Counter((p, o) for p, o, _ in sent) and not dirty


def test_a_big_hour_is_compacted_by_spark_beside_the_shared_job(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, caplog: Any
) -> None:
    """Hour 10's batch files are bigger than the target file size: Spark spreads it over
    several files; hour 11 is the shared job's (its one record's file, ~3 KB, is under half
    the target: compacted, not adopted)."""
    config, settings = fresh_table(settings, tmp_path, output__target_file_size="6KiB")
    create_topic(broker, config.source.topic, 1)
    produce(
        broker,
        config.source.topic,
        records(
            [(0, at(10) + timedelta(seconds=10 * m)) for m in range(300)] + [(0, at(11, 5)), (0, at(12, 30))]
        ),
    )
    run_dump(spark, config, settings, "run-1", at(13))
    with caplog.at_level(logging.INFO, logger="tidemark.seal.compaction"):
        result = run_seal(spark, config, settings, "run-1")
    assert result.sealed == ["2026-11-22T10", "2026-11-22T11"]
    assert any("compacting 1 hours together (2026-11-22T11)" in r.getMessage() for r in caplog.records)
    journal = HourJournal(settings.state_location, config.table).state()
    assert len(journal.hours["2026-11-22T10"].files) > 1 and journal.hours["2026-11-22T10"].rows == 300
    assert len(journal.hours["2026-11-22T11"].files) == 1


def test_a_kill_after_the_shared_job_is_recovered_by_the_next_run(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: Any
) -> None:
    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 1)
    sent = produce(
        broker, config.source.topic, records([(0, at(h, 20)) for h in (9, 10, 11)] + [(0, at(12, 30))])
    )
    run_dump(spark, config, settings, "run-1", at(13))
    seal_killed_at(spark, config, settings, monkeypatch, "mid_compaction")
    result = run_seal(spark, config, settings, "run-1")
    assert result.sealed == ["2026-11-22T09", "2026-11-22T10", "2026-11-22T11"]
    rows, _, _ = landed(settings, config.table)
    assert rows == Counter((p, o) for p, o, _ in sent)  # hour 12's record waits in its batch file


def test_a_failing_default_blocks_its_hour_and_names_the_duplicates(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 1)
    twice = records([(0, at(10, 5)), (0, at(10, 6))], prefix="same")
    twice[1] = replace(twice[1], value=twice[0].value)  # one event sent twice
    produce(broker, config.source.topic, twice + records([(0, at(11, 5)), (0, at(12, 30))]))
    run_dump(spark, config, settings, "run-1", at(13))
    with pytest.raises(QualityGateError, match="2026-11-22T10"):
        run_seal(spark, config, settings, "run-1")
    journal = HourJournal(settings.state_location, config.table).state()
    quarantined = journal.hours["2026-11-22T10"]
    assert quarantined.quarantined
    assert quarantined.quality["failures"] == [
        "expect_column_values_to_be_unique(event_id), 2 unexpected, e.g. ['same-0', 'same-0']"
    ]
    assert journal.hours["2026-11-22T11"].published


def test_one_hours_bad_file_fails_that_hour_named_and_the_hours_before_it_seal(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """A batch file of hour 11 is corrupt: the shared compaction of hours 10-12 keeps going,
    hour 10 seals, hour 11 fails naming itself, hour 12 waits for it (hours seal in order)."""
    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 1)
    produce(
        broker,
        config.source.topic,
        records([(0, at(h, m)) for h in (10, 11, 12) for m in (5, 35)] + [(0, at(13, 40))]),
    )
    run_dump(spark, config, settings, "run-1", at(14))
    layout = Layout(settings, config.table)
    (bad,) = sorted((layout.open_dir / "dt=2026-11-22" / "hr=11").glob("*.parquet"))
    bad.write_bytes(b"PAR1 not a parquet file PAR1")

    with pytest.raises(Exception) as failed:
        run_seal(spark, config, settings, "seal-1")
    notes = " ".join(getattr(failed.value, "__notes__", []))
    assert f"{config.table}: sealing hour 2026-11-22T11 failed" in notes, (notes, failed.value)
    journal = HourJournal(settings.state_location, config.table).state()
    assert sorted(journal.hours) == ["2026-11-22T10"]
    assert registered(spark, config.table) == ["dt=2026-11-22/hr=10"]


def test_a_seal_paused_past_its_lease_never_writes_into_its_successors_hidden_hour(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: Any
) -> None:
    """The local disk's fence. A seal froze (no renewals) with its compacted files staged; the
    next run's seal (the YAML's target file size lowered meanwhile: more files) took the
    expired lock and quarantined the hour (a duplicate event), which leaves it in the hidden
    ``_sealing`` directory. When the frozen one resumes, nothing of it may enter that
    directory: its files would replace some of the successor's and sit beside the others, and a
    release would register rows twice. It fails with a named error; the release registers each
    row once."""

    config, settings = fresh_table(settings, tmp_path, output__target_file_size="4KiB")
    create_topic(broker, config.source.topic, 1)
    hour = records([(0, at(10) + timedelta(seconds=10 * m)) for m in range(300)], prefix="z")
    hour.append(replace(hour[-1]))  # one event sent twice: hour 10 is quarantined
    sent = produce(broker, config.source.topic, hour + records([(0, at(12, 30))], prefix="later"))
    run_dump(spark, config, settings, "run-1", at(13))
    size = sum(
        f.stat().st_size
        for f in (Layout(settings, config.table).open_dir / "dt=2026-11-22" / "hr=10").rglob("*.parquet")
    )
    frozen_config = config.model_copy(
        update={"output": config.output.model_copy(update={"target_file_size": size // 2 + 1})}  # 2 files
    )
    config = config.model_copy(
        update={"output": config.output.model_copy(update={"target_file_size": size // 6 + 1})}  # 6 files
    )

    monkeypatch.setenv("TIDEMARK_LOCK_LEASE_S", "1")
    monkeypatch.setattr(Lease, "renewing", lambda self: nullcontext())  # frozen: no renewals
    frozen, resume = threading.Event(), threading.Event()
    real_write = HourFiles.write_staged

    def pausing_write(self: HourFiles, *args: Any, **kwargs: Any) -> Any:
        written = real_write(self, *args, **kwargs)
        if threading.current_thread().name == "zombie" and not frozen.is_set():
            frozen.set()  # written into its scratch, not yet complete nor entered
            resume.wait(120)
        return written

    monkeypatch.setattr(HourFiles, "write_staged", pausing_write)
    outcome: list[BaseException] = []

    def zombie() -> None:
        try:
            run_seal(spark, frozen_config, settings, "run-1")
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=zombie, name="zombie")
    thread.start()
    assert frozen.wait(120), "the first seal never finished its write"
    with pytest.raises(QualityGateError, match="2026-11-22T10"):
        run_seal(spark, config, settings, "run-2")  # waits out the lease, quarantines hour 10
    resume.set()
    thread.join(120)
    assert len(outcome) == 1 and isinstance(outcome[0], TidemarkError), outcome
    run_release(spark, config, settings, "2026-11-22T10", "release-10")
    rows, _, _ = landed(settings, config.table)
    assert rows == Counter((p, o) for p, o, _ in sent)  # hour 12's record in its batch file
    assert "dt=2026-11-22/hr=10" in registered(spark, config.table)
