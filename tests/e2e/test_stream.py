"""The continuous writer end to end: the batch DAG's dump, a switch to the stream, the stream
(spark_jobs/stream.py, its own process) killed at each point of a micro-batch and restarted,
sealing hours as it goes, then a switch back to the batch dump. Every record lands once; the
batches of the commit log tile the topic whoever wrote them. The stream also seals an Iceberg
table, through a kill between its Iceberg commit and the journal."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dags import asset_events, run_dag
from tests.helpers.iceberg import pyiceberg_rows, snapshots_of
from tests.helpers.jobs import create_metastore, job_process, run_job_process
from tests.helpers.streams import KILLS, STREAM_ARGS, assert_the_kill_stands, restart_words, tiled
from tests.helpers.tables import fresh_table, landed, late_landed
from tidemark.errors import WriterModeError
from tidemark.faults import EXIT_CODE
from tidemark.ingest.dump import run_dump
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.locks import TableLock
from tidemark.state.mode import TableWriter
from tidemark.stream.runner import run_stream
from tidemark.stream.status import STREAM_LOCK, StreamStatus
from tidemark_dev.generator import create_topic, events, produce

pytestmark = pytest.mark.e2e

# The stream's processing time is the wall clock: the test's events are recent hours.
NOW = datetime.now(UTC)
HOUR = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
SEED = int(os.environ.get("TIDEMARK_CHAOS_SEED", "20261124"))


def stream(settings: Settings, table: str, fail_at: str | None = None) -> tuple[int, str, str]:
    return run_job_process(
        settings, "stream", table, "stream-test", "--until-caught-up", *STREAM_ARGS, fail_at=fail_at
    )


def killed_at_random(settings: Settings, table: str, rng: random.Random) -> float:
    """A stream (not a catch-up run) SIGKILLed with its Python workers at a random moment."""
    proc = job_process(settings, "stream", table, "stream-chaos", *STREAM_ARGS)
    delay = rng.uniform(8.0, 25.0)
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, f"the stream ended by itself: {proc.returncode}"
    return delay


def assert_exact(settings: Settings, table: str, delivered: list[tuple[int, int, Any]]) -> None:
    rows, dirty, _ = landed(settings, table)
    assert rows + dirty + late_landed(settings, table) == Counter((p, o) for p, o, _ in delivered)
    assert tiled(settings, table) == {
        p: max(o for q, o, _ in delivered if q == p) + 1 for p in {q for q, _, _ in delivered}
    }


def test_the_stream_killed_at_every_point_of_a_micro_batch_is_exact_and_hands_back_to_batch(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    home = tmp_path / "home"  # its own Derby: another test's in-process session may hold the shared one
    own = replace(settings, home=home, warehouse=str(home / "warehouse"))
    config, own = fresh_table(own, tmp_path, output__target_file_size="1KiB")
    table = config.table
    create_topic(broker, config.source.topic, 2)
    writer = TableWriter(own.state_dir, table)

    # the batch DAG's dump: hour H
    delivered = produce(broker, table, events(60, start=HOUR, partitions=2))
    assert (
        run_dump(spark, config, own, "scheduled__1", NOW).status == "committed"
    )  # in-process: no JVM to start
    assert_exact(own, table, delivered)

    # handed to the stream: the batch dump is refused before it plans anything
    writer.switch("stream", by="test", reason="minutes-fresh data", at=NOW.isoformat())
    with pytest.raises(WriterModeError, match="tidemark switch --table"):
        run_dump(None, config, own, "scheduled__2", NOW)
    assert CommitLog(own.state_dir, table).state().batches == 1

    # the stream, killed at each point of a micro-batch over new records, then restarted (the
    # jobs' Derby metastore made first: a kill inside the seal must not land in its creation)
    create_metastore(own)
    expected_at_restart = "a new query"
    for i, point in enumerate(KILLS):
        delivered += produce(broker, table, events(20, start=HOUR + timedelta(hours=1), partitions=2, seed=i))
        commits_before = CommitLog(own.state_dir, table).state().batches
        code, _, err = stream(own, table, fail_at=point)
        assert code == EXIT_CODE, f"no crash at {point}: {err[-3000:]}"
        assert expected_at_restart in err, (point, expected_at_restart)  # the restart saw how they stand
        expected_at_restart = restart_words(point)
        assert_the_kill_stands(own, table, point, commits_before)
        rows, dirty, _ = landed(own, table)
        assert max((rows + dirty + late_landed(own, table)).values()) == 1, (
            f"a record twice after a kill at {point}"
        )
        assert tiled(own, table)
    # then SIGKILLed at a random moment of a running stream
    rng = random.Random(SEED)
    delivered += produce(broker, table, events(30, start=HOUR + timedelta(hours=1), partitions=2, seed=50))
    delay = killed_at_random(own, table, rng)
    rows, dirty, _ = landed(own, table)
    assert max((rows + dirty + late_landed(own, table)).values()) == 1, (
        f"a record twice, killed at {delay:.1f}s"
    )
    assert tiled(own, table)
    code, out, err = stream(own, table)
    assert code == 0, err[-3000:]
    assert any(case in err for case in ("agree", "not recorded as done", "not in the commit log")), err[
        -3000:
    ]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "stopped" and "caught up" in result["reason"], result
    assert_exact(own, table, delivered)
    run_ids = [c.run_id for c in CommitLog(own.state_dir, table).iter_commits()]
    assert len(run_ids) == len(set(run_ids))  # each micro-batch committed once
    # the stream sealed hour H as its ready time passed it (same journal as the seal job)
    journal = HourJournal(own.state_dir, table).state()
    assert journal.hours[HOUR.strftime("%Y-%m-%dT%H")].published
    status = StreamStatus(own.state_dir, table).read()
    assert status is not None and status["state"] == "stopped"

    # handed back to the batch DAG: its next dump goes on where the stream stopped
    writer.switch("batch", by="test", reason="back to hourly", at=NOW.isoformat())
    with pytest.raises(WriterModeError, match="written by the batch"):
        run_stream(None, config, own, "stream-late", clock=lambda: NOW)  # type: ignore[arg-type]
    delivered += produce(broker, table, events(20, start=HOUR + timedelta(hours=2), partitions=2, seed=99))
    assert run_dump(spark, config, own, "scheduled__3", NOW).status == "committed"
    assert_exact(own, table, delivered)


def test_the_stream_dag_switches_starts_watches_announces_and_stops_the_stream(
    dag_env: Settings, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, settings = fresh_table(dag_env, tmp_path, retries=0, stream__trigger_interval="2s")
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(settings.conf_dir))
    table = config.table
    create_topic(broker, table, 2)
    # from a few minutes into hour H (the events' disorder is at most 2 minutes): H seals first
    start = HOUR + timedelta(minutes=3)
    delivered = produce(broker, table, events(80, start=start, span=timedelta(hours=2), partitions=2))
    when = NOW.replace(microsecond=0)
    pid = None
    try:
        # hand the table to the stream: started, watched from the triggerer until hour H is
        # sealed, whose asset event is then announced
        states = run_dag(f"tidemark_stream_{table}", when, {"switch_to": "stream", "reason": "fresher data"})
        holder = TableLock(settings.state_dir, table, STREAM_LOCK).holder()
        pid = int(holder["holder"].split("pid ")[1].split(",")[0]) if holder else None
        assert states == dict.fromkeys(
            ("switch", "ensure_stream", "watch_stream", "announce", "metrics"), "success"
        )
        assert (HOUR.strftime("%Y-%m-%dT%H"), 1) in asset_events(f"tidemark_stream_{table}")
        # the ingest DAG's dump skips while the stream writes the table
        ingest = run_dag(f"tidemark_ingest_{table}", when + timedelta(minutes=1))
        assert (ingest["dump"], ingest["seal"]) == ("skipped", "skipped")
        # handed back: the stream stops after its micro-batch; the run waits for it
        states = run_dag(
            f"tidemark_stream_{table}", when + timedelta(minutes=2), {"switch_to": "batch", "reason": "done"}
        )
        assert states["watch_stream"] == "success"
        status = StreamStatus(settings.state_dir, table).read()
        assert status is not None and status["state"] == "stopped", status
        assert TableLock(settings.state_dir, table, STREAM_LOCK).holder() is None
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert_exact(settings, table, delivered)


def test_the_stream_commits_each_hour_of_an_iceberg_table_once_through_a_kill_after_the_commit(
    broker: str, settings: Settings, tmp_path: Path
) -> None:
    """``output.table_format: iceberg`` under the stream: its seal makes each hour one Iceberg
    snapshot; killed between that commit and the journal, the restarted stream recognises the
    commit from the snapshot's summary and commits nothing twice; pyiceberg reads each sealed
    hour's records once."""
    home = tmp_path / "home"
    own = replace(settings, home=home, warehouse=str(home / "warehouse"))
    config, own = fresh_table(own, tmp_path, output__table_format="iceberg")
    table = config.table
    create_topic(broker, config.source.topic, 2)
    TableWriter(own.state_dir, table).switch(
        "stream", by="test", reason="an Iceberg stream", at=NOW.isoformat()
    )
    create_metastore(own)
    # hour H, then the next hour (its watermark makes H ready); no jitter back into H - 1
    delivered = produce(broker, table, events(60, start=HOUR, partitions=2, disorder=timedelta(0)))
    delivered += produce(broker, table, events(20, start=HOUR + timedelta(hours=1), partitions=2, seed=1))
    key = HOUR.strftime("%Y-%m-%dT%H")

    code, _, err = stream(own, table, fail_at="after_registration")  # committed, not journaled
    assert code == EXIT_CODE, err[-3000:]
    assert [s["tidemark.hour"] for s in snapshots_of(own, table)] == [key]
    assert key not in HourJournal(own.state_dir, table).state().hours  # its entry follows the commit

    code, out, err = stream(own, table)
    assert code == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["status"] == "stopped"
    assert key in HourJournal(own.state_dir, table).state().hours, err[-6000:]
    assert HourJournal(own.state_dir, table).state().hours[key].published
    assert [s["tidemark.hour"] for s in snapshots_of(own, table)] == [key]  # not committed twice
    assert tiled(own, table) == {p: max(o for q, o, _ in delivered if q == p) + 1 for p in (0, 1)}
    expected = {
        (p, o): json.loads(m.value or b"{}")["event_id"]
        for p, o, m in delivered
        if m.event_time is not None and m.event_time.replace(minute=0, second=0, microsecond=0) == HOUR
    }
    assert pyiceberg_rows(own, table, hour=HOUR.strftime("%H")) == expected
