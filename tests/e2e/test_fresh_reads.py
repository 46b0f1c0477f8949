"""The fresh read of an Iceberg table read by name in a loop while it is written: the batch
DAG's dumps and seals, late rows amended in, a switch to the stream (its own process, sealing
as it goes) and back to batch; then the same under jobs killed at random. At every sample no
record is read twice, every record read was produced and committed, and none leaves the
fresh read once in it; after the last seal the fresh read and the complete read hold the
same rows."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.chaos import JobClock, job, killed_at_random
from tests.helpers.fresh import FreshSampler
from tests.helpers.iceberg import pyiceberg_rows
from tests.helpers.jobs import create_metastore, run_job_process
from tests.helpers.streams import STREAM_ARGS
from tests.helpers.tables import fresh_table
from tidemark.config import TableConfig
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark.state.mode import TableWriter
from tidemark_dev.generator import create_topic, events, produce, records

pytestmark = pytest.mark.e2e

# the stream's processing time is the wall clock: the test's events are recent hours
NOW = datetime.now(UTC)
HOUR = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
SEED = 20261129


def _table(settings: Settings, tmp_path: Path, broker: str) -> tuple[TableConfig, Settings]:
    home = tmp_path / "home"  # its own Derby: the in-process Spark of other tests holds the shared one
    own = replace(settings, home=home, warehouse=str(home / "warehouse"))
    config, own = fresh_table(own, tmp_path, output__table_format="iceberg", late_policy="amend")
    create_topic(broker, config.source.topic, 2)
    return config, own


def _hour(n: int, count: int, seed: int) -> Any:
    return list(
        events(count, start=HOUR + timedelta(hours=n), partitions=2, seed=seed, disorder=timedelta(0))
    )


def _late(n: int, prefix: str) -> Any:
    """Two records of hour ``n`` (sealed by the time they come)."""
    return records(
        [(0, HOUR + timedelta(hours=n, minutes=10)), (1, HOUR + timedelta(hours=n, minutes=40))],
        prefix=prefix,
    )


def _sampled(sampler: FreshSampler, settings: Settings, table: str, last: list[tuple[int, int, Any]]) -> None:
    """Stop the sampler; it read while things changed and found nothing wrong; the fresh read
    and the complete read are the same but for ``last`` (the records of the one hour still
    open, which the fresh read alone holds)."""
    samples = sampler.stop()
    assert not sampler.problems, sampler.problems[:10]
    assert len(samples) >= 10 and len(set(samples)) >= 3, samples  # it read while the rows grew
    journal = HourJournal(settings.state_dir, table).state()
    assert journal.hours and all(e.published for e in journal.hours.values())
    fresh = pyiceberg_rows(settings, table, hour=None, branch="fresh")
    complete = pyiceberg_rows(settings, table, hour=None)
    assert set(fresh) == sampler.sent
    assert set(fresh) - set(complete) == {(p, o) for p, o, _ in last}
    assert {k: v for k, v in fresh.items() if k in complete} == complete


def _last_hour(broker: str, topic: str, sampler: FreshSampler) -> list[tuple[int, int, Any]]:
    """A record in each MQ partition an hour after the rest: their watermarks pass every
    earlier hour, so the next seal seals them all."""
    last = produce(
        broker,
        topic,
        records(
            [(0, HOUR + timedelta(hours=4, minutes=40)), (1, HOUR + timedelta(hours=4, minutes=45))],
            prefix="last",
        ),
    )
    sampler.expect(last)
    return last


def test_the_fresh_read_in_a_loop_through_batch_the_stream_seals_amends_and_back(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, own = _table(settings, tmp_path, broker)
    table, topic = config.table, config.source.topic
    sampler = FreshSampler(own, table)
    sampler.start()

    # the batch DAG: hours H and H+1, H sealed (the table and its branch made), then late rows
    sampler.expect(produce(broker, topic, _hour(0, 60, SEED) + _hour(1, 20, SEED + 1)))
    run_dump(spark, config, own, "batch-1", NOW)
    assert run_seal(spark, config, own, "seal-1").sealed == [HOUR.strftime("%Y-%m-%dT%H")]
    sampler.expect(produce(broker, topic, _late(0, "late-a") + _hour(1, 10, SEED + 2)))
    run_dump(spark, config, own, "batch-2", NOW)
    assert run_seal(spark, config, own, "seal-2").amended

    # the stream, its own process: killed once, then micro-batches and seals until caught up
    writer = TableWriter(own.state_dir, table)
    writer.switch("stream", by="test", reason="fresh reads", at=NOW.isoformat())
    create_metastore(own)
    sampler.expect(produce(broker, topic, _hour(2, 40, SEED + 3) + _late(0, "late-b") + _late(1, "late-c")))
    # a running stream killed at a random moment (a micro-batch, its branch sync, its seal)
    running = job(own, "stream", table, "stream-chaos", *STREAM_ARGS)
    assert killed_at_random(running, random.Random(SEED), 20.0), "the stream ended before its kill"
    code, _, err = run_job_process(own, "stream", table, "stream-1", "--until-caught-up", *STREAM_ARGS)
    assert code == 0, err[-3000:]

    # back to batch: more hours and late rows, and a dump whose processing time passes them all
    writer.switch("batch", by="test", reason="back to hourly", at=NOW.isoformat())
    sampler.expect(produce(broker, topic, _hour(3, 30, SEED + 4) + _late(2, "late-d")))
    run_dump(spark, config, own, "batch-3", NOW)
    run_seal(spark, config, own, "seal-3")
    last = _last_hour(broker, topic, sampler)
    run_dump(spark, config, own, "batch-4", NOW)
    run_seal(spark, config, own, "seal-4")
    _sampled(sampler, own, table, last)


def test_the_fresh_read_in_a_loop_while_dumps_and_seals_are_killed_at_random(
    broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, own = _table(settings, tmp_path, broker)
    table, topic = config.table, config.source.topic
    create_metastore(own)
    rng = random.Random(SEED)
    clock = JobClock(first_guess=6.0)
    sampler = FreshSampler(own, table)
    sampler.start()
    kills, last = 0, []
    for r in range(4):
        sampler.expect(
            produce(broker, topic, _hour(r, 30, SEED + r) + (_late(r - 1, f"late{r}") if r else []))
        )
        if r == 3:
            last = _last_hour(broker, topic, sampler)
        processing = ("--processing-time", NOW.isoformat())
        kills += killed_at_random(job(own, "dump", table, f"dump-{r}", *processing), rng, *clock.life("dump"))
        clock.finish(own, "dump", table, f"dump-{r}", *processing)
        if r:  # the first seal makes the table (its creation is not what is under test)
            kills += killed_at_random(job(own, "seal", table, f"seal-{r}"), rng, *clock.life("seal"))
        clock.finish(own, "seal", table, f"seal-{r}")
    assert kills, "no job was killed"
    _sampled(sampler, own, table, last)
