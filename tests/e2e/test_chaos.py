"""Chaos, not only named crash points: dump and seal jobs, and the merge jobs of a Delta
snapshot (real spark-submit-style processes), are killed with SIGKILL at random moments, interleaved with new data, late data and further
runs, some retried under another run id. Seeded and bounded. At the end, every produced
(MQ partition, offset) is exactly once in rows + dirty + late, every sealed hour holds the
rows its journal entry says, and no orphan or temp file is visible in any table directory."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import pytest
from deltalake import DeltaTable  # noqa: TID253

from tests.helpers.chaos import JobClock, job, killed_at_random
from tests.helpers.jobs import run_job_process
from tests.helpers.orders import send, snapshot, truth, write_parquet_source
from tests.helpers.tables import PROCESSING, START, at, fresh_table, landed, late_landed
from tidemark.faults import EXIT_CODE
from tidemark.ingest.dump import run_dump
from tidemark.ingest.resolve import resolve
from tidemark.observe.status import render, table_status
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.snapshot.bootstrap import run_bootstrap
from tidemark.snapshot.snapshots import SnapshotLog, SnapshotStore, period_of
from tidemark.snapshot.sources import BootstrapSource
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark_dev.generator import (
    Message,
    create_topic,
    delete_records,
    events,
    order_changes,
    produce,
    produce_in_transaction,
    records,
    recreate_topic,
    state_after,
)
from tidemark_dev.kafka import KafkaService

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("TIDEMARK_CHAOS_SEED", "20261123"))
ROUNDS = int(os.environ.get("TIDEMARK_CHAOS_ROUNDS", "2"))  # 2 in the suite (late data from the second on)
EXTRA_ROUNDS = 4  # rounds beyond ROUNDS while no dump or no seal has been killed yet


Send = Callable[[str, list[Message], int], list[tuple[int, int, Message]]]


def test_random_kills_of_dump_and_seal_lose_and_double_nothing(
    broker: str, settings: Settings, tmp_path: Path
) -> None:
    _kills_of_dump_and_seal(
        settings, tmp_path, lambda topic, messages, _: produce(broker, topic, messages), {}
    )


def test_random_kills_on_apache_kafka_with_aborted_transactions_lose_and_double_nothing(
    kafka: KafkaService, settings: Settings, tmp_path: Path
) -> None:
    """The same chaos against Apache Kafka, every round's events written by transactional
    producers of which one aborts: the aborted records never land, the rest exactly once."""
    bootstrap = kafka.listeners.plaintext

    def send(topic: str, messages: list[Message], r: int) -> list[tuple[int, int, Message]]:
        third = len(messages) // 3
        delivered = []
        for i, chunk in enumerate((messages[:third], messages[third : 2 * third], messages[2 * third :])):
            delivered += produce_in_transaction(
                bootstrap, topic, chunk, transactional_id=f"{topic}-{r}-{i}", commit=i != 1
            )
        return delivered

    # the events' oversized dirty records (> 1 MiB) are larger than Kafka's default limit
    big = {"max.message.bytes": str(16 << 20)}
    _kills_of_dump_and_seal(replace(settings, kafka_bootstrap=bootstrap), tmp_path, send, big)


def test_a_topic_recreated_or_records_deleted_between_a_killed_dump_and_its_retry_on_apache_kafka(
    kafka: KafkaService, settings: Settings, tmp_path: Path
) -> None:
    """A dump killed at random, then the broker's edges before its retry: DeleteRecords inside
    the planned batch, and later the topic deleted and created again. Each retry stops with the
    named error and its way out; after the audited decision every record lands exactly once,
    except the deleted or never-read offsets of the old topic, which are recorded as lost."""
    bootstrap = kafka.listeners.plaintext
    rng = random.Random(SEED + 58)
    home = tmp_path / "home"
    own = replace(settings, home=home, warehouse=str(home / "warehouse"), kafka_bootstrap=bootstrap)
    config, own = fresh_table(own, tmp_path)
    table, topic = config.table, config.source.topic
    create_topic(bootstrap, topic, 2)
    clock = JobClock(first_guess=6.0)
    processing = ("--processing-time", PROCESSING.isoformat())
    old = produce(bootstrap, topic, list(events(40, start=START, partitions=2, seed=SEED)))
    clock.finish(own, "dump", table, "first", *processing)
    log = CommitLog(own.state_dir, table)

    def pending_batch(run_id: str) -> Any:
        """The killed run's batch if it is still planned, else one planned by a dump that dies
        right after its plan: a batch whose offsets the broker changes before its retry (the
        records of a deleted topic that no plan covered are the broker's loss, not countable)."""
        state = log.state()
        if (plan := log.pending_plan(state)) is not None and plan.records_planned:
            return plan, plan.run_id
        retry = f"{run_id}-planned"
        # the killed run committed its batch: records for the one planned now (a kill late in
        # the job, after its commit)
        old.extend(
            produce(bootstrap, topic, list(events(20, start=START, partitions=2, seed=SEED + 10 + len(old))))
        )
        code, _, _ = run_job_process(own, "dump", table, retry, *processing, fail_at="after_plan")
        assert code == EXIT_CODE
        return log.pending_plan(log.state()), retry

    # DeleteRecords inside the planned batch: the retry names the loss; accept-loss records it
    old += produce(bootstrap, topic, list(events(40, start=START, partitions=2, seed=SEED + 1)))
    killed_at_random(job(own, "dump", table, "chaos-1", *processing), rng, *clock.life("dump"))
    plan, run_id = pending_batch("chaos-1")
    (planned,) = [r for r in plan.ranges if r.mq_partition == 0]
    cut = planned.start + max(1, planned.size // 2)
    delete_records(bootstrap, topic, 0, cut)
    code, _, err = run_job_process(own, "dump", table, run_id, *processing)
    assert code != 0 and "OffsetsLostToRetentionError" in err and "--action accept-loss" in err, err[-3000:]
    resolve(config, own, action="accept-loss", reason="chaos: DeleteRecords", by="chaos", at=PROCESSING)
    clock.finish(own, "dump", table, "after-loss", *processing)

    # the topic re-created between a killed attempt and its retry: the retry names rebase
    old += produce(bootstrap, topic, list(events(40, start=START, partitions=2, seed=SEED + 2)))
    killed_at_random(job(own, "dump", table, "chaos-2", *processing), rng, *clock.life("dump"))
    _, run_id = pending_batch("chaos-2")  # a failed attempt: its batch planned on the old topic
    recreate_topic(bootstrap, topic, 2)
    new = produce(bootstrap, topic, list(events(30, start=START, partitions=2, seed=SEED + 3)))
    code, _, err = run_job_process(own, "dump", table, run_id, *processing)
    assert code != 0 and "TopicRecreatedError" in err and "--action rebase" in err, err[-3000:]
    resolve(config, own, action="rebase", reason="chaos: the topic was re-created", by="chaos", at=PROCESSING)
    clock.finish(own, "dump", table, run_id, *processing)
    clock.finish(own, "dump", table, "after-rebase", *processing)

    landed_ids = Counter(event_ids(Layout(own, table)))
    lost = recorded_gaps(log)
    expected_old = Counter(
        json.loads(m.value or b"{}")["event_id"]
        for p, o, m in old
        if not any(o in r for r in lost.get(p, ()))
    )
    expected_new = Counter(json.loads(m.value or b"{}")["event_id"] for _, _, m in new)
    assert landed_ids == expected_old + expected_new  # exactly once, the lost ones recorded
    assert set(range(planned.start, cut)) <= set().union(*(set(r) for r in lost.get(0, ())))
    assert table_status(config, own)["lost_to_retention"] == sum(len(r) for rs in lost.values() for r in rs)


def event_ids(layout: Layout) -> list[str]:
    """The event ids of every row file under the table (sealed hours and committed batches)."""
    return [
        event_id
        for path in layout.table_dir.rglob("*.parquet")
        for event_id in pq.read_table(path, columns=["event_id"]).column("event_id").to_pylist()
    ]


def recorded_gaps(log: CommitLog) -> dict[int, list[range]]:
    """MQ partition -> the offset ranges the commit log records as lost (of the old topic)."""
    gaps: dict[int, list[range]] = {}
    for commit in log.iter_commits():
        for r in commit.ranges:
            if r.gap_from is not None and r.gap_to is not None:
                gaps.setdefault(r.mq_partition, []).append(range(r.gap_from, r.gap_to))
    return gaps


def _kills_of_dump_and_seal(
    settings: Settings, tmp_path: Path, send: Send, topic_config: dict[str, str]
) -> None:
    broker = settings.kafka_bootstrap
    rng = random.Random(SEED)
    home = tmp_path / "home"  # its own Derby: the in-process Spark of other tests holds the shared one
    own = replace(settings, home=home, warehouse=str(home / "warehouse"))
    config, own = fresh_table(own, tmp_path, dirty__max_dirty_ratio=0.5)
    create_topic(broker, config.source.topic, 3, topic_config)
    produced: list[tuple[int, int, Any]] = []
    kills: Counter[str] = Counter()
    clock = JobClock(first_guess=6.0)  # a dump or seal job with the class archive, on 2 cores
    r = 0
    # ROUNDS rounds, and more (at most EXTRA_ROUNDS) until the seed has killed a dump and a
    # seal: a kill aimed at a job that ended first is no kill, and the jobs' lives vary by machine
    while r < ROUNDS or (min(kills["dump"], kills["seal"]) < 1 and r < ROUNDS + EXTRA_ROUNDS):
        hour = START + timedelta(hours=r)
        produced += send(
            config.source.topic,
            list(events(90, start=hour, partitions=3, seed=SEED + r, dirty_fraction=0.05)),
            r,
        )
        if r:  # late data: records of the first hour, sealed by now
            produced += produce(
                broker,
                config.source.topic,
                records([(r % 3, START + timedelta(minutes=7 * r))], prefix=f"late{r}"),
            )
        processing = (PROCESSING + timedelta(hours=r)).isoformat()
        run_id = f"chaos-{r}"
        kills["dump"] += killed_at_random(
            job(own, "dump", config.table, run_id, "--processing-time", processing),
            rng,
            *clock.life("dump"),
        )
        if rng.random() < 0.5:  # the retry under another run id completes the same pending batch
            run_id = f"chaos-{r}-retry"
        clock.finish(own, "dump", config.table, run_id, "--processing-time", processing)
        if r:  # not the first seal: it creates the jobs' embedded Derby metastore, which a kill
            # there corrupts for good (a test-topology artefact: production has a metastore service)
            kills["seal"] += killed_at_random(
                job(own, "seal", config.table, f"seal-{r}"), rng, *clock.life("seal")
            )
        clock.finish(own, "seal", config.table, f"seal-{r}" if rng.random() < 0.5 else f"seal-{r}-retry")
        r += 1
    assert kills["dump"] and kills["seal"], (
        f"in {r} rounds the seed killed {dict(kills)}; chaos needs a killed dump and seal "
        f"(lives seen: {clock.seconds} s, {clock.lines} log lines)"
    )

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


def test_random_kills_of_delta_snapshot_merges_lose_and_double_nothing(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """The merge job of a Delta snapshot (``cdc.snapshot_format: delta``) killed at a random
    moment, finished by its retry or by a run under another id: every label's Delta version
    holds the state the changes give, each recorded once, and no Delta commit lacks its
    record. (In-process crash points at each step: tests/integration/test_snapshots.py.)"""
    rng = random.Random(SEED)
    home = (
        tmp_path / "home"
    )  # the merge jobs' own Derby (they do not use it; the test's Spark holds the shared one)
    own = replace(settings, home=home, warehouse=str(home / "warehouse"))
    config, own = fresh_table(
        own, tmp_path, template="orders", cdc__snapshot_every="hour", cdc__snapshot_format="delta"
    )
    create_topic(broker, config.source.topic, 2)
    before = order_changes(120, start=at(9), seed=1)
    source_state = state_after(before)
    send(broker, config, before)
    source = BootstrapSource("parquet", str(write_parquet_source(tmp_path / "src", source_state)))
    run_bootstrap(spark, config, own, "boot-1", source, as_of=at(10), label="base")
    after = order_changes(150, start=at(10), span=at(12, 20) - at(10), existing=source_state, seed=11)
    send(broker, config, after, duplicates=0.1)
    run_dump(spark, config, own, "ingest-1", at(12, 30))
    run_seal(spark, config, own, "ingest-1")
    clock = JobClock(first_guess=6.0)  # timed on the first merge: the killed one builds on it
    clock.finish(own, "merge", config.table, "merge-10", "--snapshot", "2026-11-22T10")
    label = "2026-11-22T11"
    merging = job(own, "merge", config.table, "merge-11", "--snapshot", label)
    assert killed_at_random(merging, rng, *clock.life("merge")), "the merge ended before its kill"
    retry = "merge-11" if rng.random() < 0.5 else "merge-11-retry"
    clock.finish(own, "merge", config.table, retry, "--snapshot", label)
    for label in ("2026-11-22T10", "2026-11-22T11"):
        end = period_of(config, label).end
        changes = [c for c in after if datetime.fromisoformat(c["updated_at"]) < end]
        assert snapshot(spark, config, label, own, by_name=False) == truth(
            state_after(changes, source_state)
        )  # the jobs' own metastore
    records = list(SnapshotLog(own.state_location, config.table).records())
    assert [(r.label, r.version, r.table_version) for r in records] == [
        ("base", 1, 0),
        ("2026-11-22T10", 1, 1),
        ("2026-11-22T11", 1, 2),
    ]
    table = DeltaTable(str(SnapshotStore(spark, config, own).table_dir))
    assert table.version() == 2 and table.transaction_version(f"tidemark-snapshot-{config.table}") == 2
    assert "; Delta version 2" in render(table_status(config, own))
