"""Chaos on the production topology's store: the warehouse and the state on S3 (a real
SeaweedFS), version directories, garbage collection at a retention of 0 s, and the steps that
run beside the batch path: a rebuild of an hour (which writes its next version under its own
lock) runs at the same time as dumps and seals that amend the same hour with late rows, a
quarantined hour is released by a seal, and any of these jobs is SIGKILLed at a random moment
and retried, some under another run id. Seeded and bounded.

At the end, what a reader is pointed at (the journal's files for sealed hours, committed batch
files for open ones) holds every produced row exactly once; every sealed hour holds the rows
its journal entry says; and nothing else is left in the table's directory: no orphan batch
file, no half-written or abandoned version directory."""

from __future__ import annotations

import os
import random
import uuid
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.chaos import JobClock, killed_at_random
from tests.helpers.jobs import job_process
from tests.helpers.tables import AMOUNT_AT_MOST_100, PROCESSING, START, fresh_table, landed, read_pairs
from tests.helpers.timeouts import HEAVY
from tidemark.faults import EXIT_CODE
from tidemark.ingest.publishers import publisher
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout, token_of_file, version_dir_of
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("TIDEMARK_CHAOS_SEED", "20261125"))
PARTITIONS = 3
ROUNDS = 4  # hour 10 sealed in round 1, rebuilt beside rounds 2 and 3; hour 11 released in 3
# the errors a step that lost a race names (its retry goes on): never a silent result
EXPECTED_REFUSALS = ("VersionConflictError", "RebuildError", "BatchConflictError", "LeaseLostError")


def finish(settings: Settings, clock: JobClock, name: str, table: str, run_id: str, *extra: str) -> str:
    """Run a job to success (or, for a seal, to its quarantine of an hour); a refusal that
    names a lost race is retried (at most 3 times)."""
    for _ in range(4):
        proc = job_process(settings, name, table, run_id, *extra)
        out, err = proc.communicate(timeout=300)
        if proc.returncode == 0:
            return out
        if "QualityGateError" in err:  # its result: the hour it quarantined, recorded (released later)
            return out
        refusals = [e for e in EXPECTED_REFUSALS if e in err]
        assert refusals, f"{name} {run_id} failed after chaos:\n{err[-4000:]}"
        print(f"{name} {run_id}: refused ({', '.join(refusals)}); retried")
    raise AssertionError(f"{name} {run_id} kept failing: {err[-3000:]}")


def hour_rows(hour: int, r: int, rng: random.Random) -> list[Any]:
    """Some events of an hour on every MQ partition (amounts within the quality gate)."""
    at = START + timedelta(hours=hour)
    return records(
        [(p, at + timedelta(minutes=rng.randrange(60))) for p in range(PARTITIONS) for _ in range(8)],
        prefix=f"h{hour}r{r}",
    )


@HEAVY
def test_random_kills_on_s3_with_rebuilds_amends_releases_and_collection_interleaved(
    broker: str, s3: str, settings: Settings, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    lake = f"{s3}/{uuid.uuid4().hex[:10]}"
    own = replace(settings, home=tmp_path / "home", warehouse=f"{lake}/warehouse", state_uri=f"{lake}/state")
    config, own = fresh_table(
        own,
        tmp_path,
        late_policy="amend",
        output__version_retention="0s",
        quality__expectations=AMOUNT_AT_MOST_100,
    )
    table = config.table
    create_topic(broker, config.source.topic, PARTITIONS)
    clock = JobClock(first_guess=8.0)
    produced: list[tuple[int, int, Any]] = []
    kills = 0
    for r in range(ROUNDS):
        batch = hour_rows(r, r, rng)
        if r == 1:  # hour 11 fails the quality gate: quarantined until a seal releases it
            batch += records(
                [(0, START + timedelta(hours=1, minutes=30), {"amount": "500.00"})], prefix="bad"
            )
        if r:  # late rows of hour 10, sealed by now: amended into its next version
            batch += records([(r % PARTITIONS, START + timedelta(minutes=3 * r))], prefix=f"late{r}")
        produced += produce(broker, config.source.topic, batch)
        processing = ["--processing-time", (PROCESSING + timedelta(hours=r)).isoformat()]
        sealed = HourJournal(own.state_location, table).state().hours
        # a rebuild of hour 10 runs beside this round's dump and seal, and may be killed too
        rebuild = None
        if "2026-11-22T10" in sealed and sealed["2026-11-22T10"].published:
            rebuild = job_process(own, "rebuild", table, f"rebuild-{r}", "--hours", "2026-11-22T10")
        kills += killed_at_random(
            job_process(own, "dump", table, f"dump-{r}", *processing), rng, *clock.life("dump")
        )
        dump_id = f"dump-{r}-retry" if rng.random() < 0.5 else f"dump-{r}"
        finish(own, clock, "dump", table, dump_id, *processing)
        release = [
            "--release",
            ",".join(
                k for k, e in HourJournal(own.state_location, table).state().hours.items() if e.quarantined
            ),
        ]
        if r:  # not the first seal: it creates the jobs' embedded Derby metastore, which a kill
            # there corrupts for good (a test-topology artefact: production has a metastore service)
            kills += killed_at_random(
                job_process(own, "seal", table, f"seal-{r}", *release), rng, *clock.life("seal")
            )
        if rebuild is not None:
            if rng.random() < 0.5:
                kills += killed_at_random(rebuild, rng, *clock.life("seal"))
            else:
                rebuild.communicate(timeout=300)  # it may lose a race (named) or succeed
            finish(own, clock, "rebuild", table, f"rebuild-{r}", "--hours", "2026-11-22T10")
        finish(own, clock, "seal", table, f"seal-{r}-retry" if rng.random() < 0.5 else f"seal-{r}", *release)
    assert kills >= 2, f"the seed killed only {kills} jobs; chaos needs kills"

    # every watermark past the last round's hour: everything is sealed, released, amended and collected
    produced += produce(
        broker,
        config.source.topic,
        records([(p, START + timedelta(hours=ROUNDS + 1)) for p in range(PARTITIONS)], prefix="end"),
    )
    ending = ["--processing-time", (PROCESSING + timedelta(hours=ROUNDS + 1)).isoformat()]
    finish(own, clock, "dump", table, "dump-end", *ending)
    quarantined = [
        k for k, e in HourJournal(own.state_location, table).state().hours.items() if e.quarantined
    ]
    finish(own, clock, "seal", table, "seal-end", "--release", ",".join(quarantined))
    finish(own, clock, "seal", table, "seal-collect")  # the replaced versions of seal-end too

    layout = Layout(own, table)
    store = layout.store
    journal = HourJournal(own.state_location, table).state()
    assert {k for k, e in journal.hours.items() if e.published} >= {
        f"2026-11-22T{10 + h}" for h in range(ROUNDS)
    }
    assert journal.hours["2026-11-22T11"].kind.value in ("release", "amend", "rebuild")
    # what readers are pointed at: the journal's files of sealed hours, committed open files
    readable: Counter[tuple[int, int]] = Counter()
    pointed: set[str] = set()
    for key, entry in journal.hours.items():
        held = Counter[tuple[int, int]]()
        for relative in entry.files:
            held += read_pairs(store, relative, "_mq_partition", "_mq_offset")
        assert sum(held.values()) == entry.rows, (key, entry.rows, sum(held.values()))
        readable += held
        pointed |= set(entry.files)
    committed = {f for c in CommitLog(own.state_location, table).iter_commits() for f in c.files}
    still_open = [f for f in store.files(layout.relative(layout.open_dir)) if f in committed]
    for relative in still_open:
        readable += read_pairs(store, relative, "_mq_partition", "_mq_offset")
    _, dirty, _ = landed(own, table)
    assert readable + dirty == Counter((p, o) for p, o, _ in produced)
    # nothing else in the table's directory: no orphan batch file, no abandoned version
    leftovers = [
        f
        for f in store.all_files(layout.relative(layout.table_dir))
        if f.endswith(".parquet") and f not in pointed and f not in still_open
    ]
    assert leftovers == [], leftovers
    versions = {d for f in pointed if (d := version_dir_of(f))}
    present = {d for f in store.all_files(layout.relative(layout.table_dir)) if (d := version_dir_of(f))}
    assert present <= versions, sorted(present - versions)


def test_an_attempt_that_lost_its_batch_never_deletes_nor_adds_to_the_committed_one(
    broker: str, s3: str, settings: Settings, tmp_path: Path
) -> None:
    """A dump killed before its commit record (its files carry its lease token); the retry
    (a later token) rolls them back and commits. Then the first attempt acts as a zombie would
    (paused, its lease long gone): one of its Spark tasks writes a row file and a dirty file
    late, and it rolls the batch back. The committed files stay, the seal reads only what the
    commit record lists, the dirty table shows only the committed dirty records, and the
    zombie's files are gone once the hour is sealed."""

    lake = f"{s3}/{uuid.uuid4().hex[:10]}"
    own = replace(settings, home=tmp_path / "home", warehouse=f"{lake}/warehouse", state_uri=f"{lake}/state")
    config, own = fresh_table(own, tmp_path, dirty__max_dirty_ratio=0.5)
    table = config.table
    create_topic(broker, config.source.topic, 1)
    produced = produce(
        broker,
        config.source.topic,
        records(
            [(0, START + timedelta(minutes=m)) for m in (5, 25, 45)]
            + [(0, START + timedelta(hours=1, minutes=30))]
        )
        + records([(0, START + timedelta(minutes=50), {"user_id": "not-a-number"})], prefix="bad"),
    )
    processing = ["--processing-time", (PROCESSING + timedelta(hours=1)).isoformat()]
    layout = Layout(own, table)
    store = layout.store
    killed = job_process(own, "dump", table, "dump-1", *processing, fail_at="before_commit_record")
    killed.communicate(timeout=300)
    assert killed.returncode == EXIT_CODE
    zombie_files = store.files(layout.relative(layout.open_dir)) + store.files(
        layout.relative(layout.open_dirty_dir(0))
    )
    (zombie_token,) = {token_of_file(f) for f in zombie_files}
    assert zombie_token is not None
    finish(own, JobClock(8.0), "dump", table, "dump-1", *processing)
    commit = CommitLog(own.state_location, table).commit(0)
    assert commit is not None and all(token_of_file(f) != zombie_token for f in commit.files)
    committed_rows = [f for f in commit.files if f.startswith(f"{table}/_open/")]
    # the zombie resumes: a late task output of its own, then its rollback of the batch
    late_row = committed_rows[0].replace(
        f"-t{token_of_file(committed_rows[0]):010d}", f"-t{zombie_token:010d}"
    )
    store.copy(committed_rows[0], late_row)
    hidden_dirty = f"{layout.relative(layout.open_dirty_dir(0))}/p0-000000000000-t{zombie_token:010d}.parquet"
    visible_dirty = next(f for f in commit.files if "__dirty/" in f)
    store.copy(visible_dirty, hidden_dirty)
    publisher(layout, 0, zombie_token).rollback()
    assert all(store.exists(f) for f in commit.files)  # nothing committed deleted
    assert store.exists(late_row) and store.exists(hidden_dirty)  # its own leftovers: not read
    finish(own, JobClock(8.0), "seal", table, "seal-1")
    journal = HourJournal(own.state_location, table).state()
    entry = journal.hours["2026-11-22T10"]
    held = Counter[tuple[int, int]]()
    for relative in entry.files:
        held += read_pairs(store, relative, "_mq_partition", "_mq_offset")
    _, dirty, _ = landed(own, table)
    assert entry.rows == 3 and sum(held.values()) == 3 and set(held.values()) == {1}
    assert sum(dirty.values()) == 1  # the committed dirty record, once; the zombie's never shown
    assert not store.exists(late_row)  # the sealed hour's leftovers are swept
    assert {p for p, o, _ in produced} == {0}
