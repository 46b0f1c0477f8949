"""The dump against a second, independent Kafka-protocol broker: noida-db, which implements
what tansu does not (the last stable offset, transactions with control records, and
CreatePartitions). Exactly once holds: aborted records never land, an open transaction's
records wait below the last stable offset and land once it commits, and a partition added
while the pipeline runs is read from its first offset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import PROCESSING, at, fresh_table, landed
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark_dev.generator import Message, create_topic, produce, records

pytestmark = pytest.mark.integration


def transaction(bootstrap: str, topic: str, messages: list[Message], *, commit: bool, tid: str) -> Any:
    """Produce ``messages`` in one transaction, committed or aborted; returns the producer
    (``commit=None`` semantics are not needed: an open transaction is ``begin`` + produce)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
    producer.init_transactions(15)
    producer.begin_transaction()
    for m in messages:
        producer.produce(topic, m.value, partition=m.partition)
    producer.flush(15)
    if commit:
        producer.commit_transaction(15)
    else:
        producer.abort_transaction(15)
    return producer


def test_committed_aborted_and_open_transactions(spark: Any, noida: Settings, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    config, settings = fresh_table(noida, tmp_path)
    bootstrap, topic = settings.kafka_bootstrap, config.source.topic
    create_topic(bootstrap, topic, 1)
    committed = records([(0, at(10, m)) for m in (1, 2, 3)], prefix="c1")
    aborted = records([(0, at(10, m)) for m in (4, 5)], prefix="ab")
    later = records([(0, at(10, m)) for m in (6, 7)], prefix="c2")
    transaction(bootstrap, topic, committed, commit=True, tid=f"{topic}-1")
    transaction(bootstrap, topic, aborted, commit=False, tid=f"{topic}-1")
    transaction(bootstrap, topic, later, commit=True, tid=f"{topic}-1")
    # An open transaction: its records sit between the last stable offset and the high watermark.
    pending = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-2"})
    pending.init_transactions(15)
    pending.begin_transaction()
    for m in records([(0, at(10, 8)), (0, at(10, 9))], prefix="open"):
        pending.produce(topic, m.value, partition=0)
    pending.flush(15)

    first = run_dump(spark, config, settings, "run-1", PROCESSING)
    rows, dirty, _ = landed(settings, config.table)
    assert not dirty
    # offsets: c1 0-2, commit marker 3, ab 4-5, abort marker 6, c2 7-8, marker 9, open 10-11
    assert sorted(rows) == [(0, 0), (0, 1), (0, 2), (0, 7), (0, 8)] and max(rows.values()) == 1
    (commit,) = CommitLog(settings.state_location, config.table).iter_commits()
    (range_,) = commit.ranges
    assert (range_.start, range_.end) == (0, 10)  # the plan stops at the last stable offset
    assert first.to_json()["rows"] == 5

    pending.commit_transaction(15)
    run_dump(spark, config, settings, "run-2", PROCESSING)
    rows, _, _ = landed(settings, config.table)
    assert sorted(rows) == [(0, 0), (0, 1), (0, 2), (0, 7), (0, 8), (0, 10), (0, 11)]
    assert max(rows.values()) == 1
    run_dump(spark, config, settings, "run-2", PROCESSING)  # a retry of a committed run: no-op
    assert landed(settings, config.table)[0] == rows


def test_a_partition_added_while_the_pipeline_runs(spark: Any, noida: Settings, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    config, settings = fresh_table(noida, tmp_path)
    bootstrap, topic = settings.kafka_bootstrap, config.source.topic
    create_topic(bootstrap, topic, 1)
    sent = produce(bootstrap, topic, records([(0, at(10, m)) for m in (5, 25, 45)]))
    run_dump(spark, config, settings, "run-1", at(11, 40))

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(15)
    sent += produce(
        bootstrap, topic, records([(1, at(10, 50)), (1, at(11, 30)), (0, at(11, 35))], prefix="b")
    )
    run_dump(spark, config, settings, "run-2", at(11, 45))
    result = run_seal(spark, config, settings, "run-2")

    rows, dirty, _ = landed(settings, config.table)
    assert not dirty and max(rows.values()) == 1
    assert set(rows) == {(p, o) for p, o, _ in sent}  # the new partition from offset 0
    last = list(CommitLog(settings.state_location, config.table).iter_commits())[-1]
    assert {r.mq_partition: (r.start, r.end) for r in last.ranges} == {0: (3, 4), 1: (0, 2)}
    assert result.sealed == ["2026-11-22T10"]  # both MQ partitions' watermarks passed 11:05
