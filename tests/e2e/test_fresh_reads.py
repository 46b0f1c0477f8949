"""The fresh read of each table kind read by name in a loop while it is written (an Iceberg
table's branch ``fresh``; a Hive table's ``<table>_fresh`` through the home's metastore
service, ``make up``'s ``derby-metastore``): the batch DAG's dumps and seals, late rows amended
in, a switch to the stream (its own process, sealing as it goes) and back to batch; then the
same under jobs killed at random. At every sample no record is read twice, every record read
was produced and committed, and none leaves the fresh read once in it; after the last seal
the fresh read and the complete read hold the same rows, as Spark reads them by name too."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.chaos import JobClock, job, killed_at_random
from tests.helpers.fresh import FreshSampler, hive_fresh_rows, hive_rows, spark_hive_rows
from tests.helpers.iceberg import pyiceberg_rows
from tests.helpers.jobs import create_metastore, job_result, run_job_process
from tests.helpers.streams import STREAM_ARGS
from tests.helpers.tables import fresh_table
from tidemark.config import TableConfig
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark.state.mode import TableWriter
from tidemark_dev.derby_metastore import DerbyMetastoreService
from tidemark_dev.generator import create_topic, events, produce, records
from tidemark_dev.net import free_port

pytestmark = pytest.mark.e2e

# the stream's processing time is the wall clock: the test's events are recent hours
NOW = datetime.now(UTC)
HOUR = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
SEED = 20261129
KINDS = ["iceberg", "hive"]


@contextmanager
def _deployment(
    settings: Settings, tmp_path: Path, broker: str, kind: str
) -> Iterator[tuple[TableConfig, Settings]]:
    """A table of ``kind`` in a home of its own (its own Derby: the in-process Spark of other
    tests holds the shared one); a Hive table's home runs its metastore service, which every
    job finds, as after `make up`."""
    home = tmp_path / "home"
    own = replace(settings, home=home, warehouse=str(home / "warehouse"), metastore_port=free_port())
    config, own = fresh_table(own, tmp_path, output__table_format=kind, late_policy="amend")
    create_topic(broker, config.source.topic, 2)
    if kind == "iceberg":
        create_metastore(own)
        yield config, own
        return
    service = DerbyMetastoreService(own)
    service.start()
    try:
        yield config, replace(own, hive_metastore_uris=service.address())
    finally:
        service.stop()


def _seal(spark: Any, config: TableConfig, settings: Settings, run_id: str) -> dict[str, Any]:
    """A seal run: an Iceberg table's in this process; a Hive table's as its own process, whose
    session reaches the home's metastore service (this process's session has its own Derby)."""
    if config.output.table_format == "iceberg":
        done = run_seal(spark, config, settings, run_id)
        return {"sealed": done.sealed, "amended": done.amended}
    code, out, err = run_job_process(settings, "seal", config.table, run_id)
    assert code == 0, err[-3000:]
    return job_result(out)


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
    if sampler.kind == "hive":
        fresh_rows, complete_rows = hive_fresh_rows(settings, table), hive_rows(settings, table)
        assert fresh_rows is not None and complete_rows is not None
        fresh, complete = Counter(fresh_rows), Counter(complete_rows)
        assert max(fresh.values()) == 1 and max(complete.values()) == 1
        assert spark_hive_rows(settings, f"{table}_fresh") == fresh  # Spark, by name
    else:
        fresh = Counter(pyiceberg_rows(settings, table, hour=None, branch="fresh"))
        complete = Counter(pyiceberg_rows(settings, table, hour=None))
    assert set(fresh) == sampler.sent
    assert set(fresh) - set(complete) == {(p, o) for p, o, _ in last}
    assert set(complete) <= set(fresh)


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


@pytest.mark.parametrize("kind", KINDS)
def test_the_fresh_read_in_a_loop_through_batch_the_stream_seals_amends_and_back(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, kind: str
) -> None:
    with _deployment(settings, tmp_path, broker, kind) as (config, own):
        _through_batch_the_stream_and_back(spark, broker, config, own)


def _through_batch_the_stream_and_back(spark: Any, broker: str, config: TableConfig, own: Settings) -> None:
    table, topic = config.table, config.source.topic
    sampler = FreshSampler(own, table, config.output.table_format)
    sampler.start()

    # the batch DAG: hours H and H+1, H sealed (the table and its fresh read made), then late rows
    sampler.expect(produce(broker, topic, _hour(0, 60, SEED) + _hour(1, 20, SEED + 1)))
    run_dump(spark, config, own, "batch-1", NOW)
    assert _seal(spark, config, own, "seal-1")["sealed"] == [HOUR.strftime("%Y-%m-%dT%H")]
    sampler.expect(produce(broker, topic, _late(0, "late-a") + _hour(1, 10, SEED + 2)))
    run_dump(spark, config, own, "batch-2", NOW)
    assert _seal(spark, config, own, "seal-2")["amended"]

    # the stream, its own process: killed once, then micro-batches and seals until caught up
    writer = TableWriter(own.state_dir, table)
    writer.switch("stream", by="test", reason="fresh reads", at=NOW.isoformat())
    sampler.expect(produce(broker, topic, _hour(2, 40, SEED + 3) + _late(0, "late-b") + _late(1, "late-c")))
    # a running stream killed at a random moment (a micro-batch, its fresh sync, its seal)
    running = job(own, "stream", table, "stream-chaos", *STREAM_ARGS)
    assert killed_at_random(running, random.Random(SEED), 20.0), "the stream ended before its kill"
    code, _, err = run_job_process(own, "stream", table, "stream-1", "--until-caught-up", *STREAM_ARGS)
    assert code == 0, err[-3000:]

    # back to batch: more hours and late rows, and a dump whose processing time passes them all
    writer.switch("batch", by="test", reason="back to hourly", at=NOW.isoformat())
    sampler.expect(produce(broker, topic, _hour(3, 30, SEED + 4) + _late(2, "late-d")))
    run_dump(spark, config, own, "batch-3", NOW)
    _seal(spark, config, own, "seal-3")
    last = _last_hour(broker, topic, sampler)
    run_dump(spark, config, own, "batch-4", NOW)
    _seal(spark, config, own, "seal-4")
    _sampled(sampler, own, table, last)


@pytest.mark.parametrize("kind", KINDS)
def test_the_fresh_read_in_a_loop_while_dumps_and_seals_are_killed_at_random(
    broker: str, settings: Settings, tmp_path: Path, kind: str
) -> None:
    with _deployment(settings, tmp_path, broker, kind) as (config, own):
        _under_random_kills(broker, config, own)


def _under_random_kills(broker: str, config: TableConfig, own: Settings) -> None:
    table, topic = config.table, config.source.topic
    rng = random.Random(SEED)
    clock = JobClock(first_guess=6.0)
    sampler = FreshSampler(own, table, config.output.table_format)
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
