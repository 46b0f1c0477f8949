"""A table is bound to its topic, on Apache Kafka (``kafka`` fixture): the wrong answers at the
broker's edges that a look-alike hides. A topic deleted and created again, a pending plan
adopted across that, retention and DeleteRecords inside a planned batch, a config that now
names another topic: each stops by name, before anything is read or published, and each way
out lands exactly what is readable and records exactly what is not."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.tables import at, fresh_table, landed
from tidemark.config import load_table_file
from tidemark.errors import (
    DataLossError,
    EarlierTopicError,
    InjectedFault,
    OffsetsLostToRetentionError,
    ResolveError,
    TopicChangedError,
    TopicRecreatedError,
)
from tidemark.ingest.dump import run_dump
from tidemark.ingest.identity import named_read_failure
from tidemark.ingest.resolve import resolve
from tidemark.observe.metrics import emit_metrics
from tidemark.observe.report import report_data
from tidemark.observe.status import render, table_status
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.audit import AuditLog
from tidemark.state.batches import MqRange, Plan
from tidemark.state.commitlog import CommitLog
from tidemark_dev.generator import create_topic, delete_records, produce, records, recreate_topic
from tidemark_dev.kafka import KafkaService

pytestmark = pytest.mark.integration


def _recreate(kafka: KafkaService, topic: str) -> None:
    recreate_topic(kafka.listeners.plaintext, topic, 1)


def _delete_records(kafka: KafkaService, topic: str, partition: int, before: int) -> None:
    delete_records(kafka.listeners.plaintext, topic, partition, before)


def _fail_after_plan(
    monkeypatch: pytest.MonkeyPatch, spark: Any, config: Any, settings: Settings, run: str
) -> None:
    """A dump whose job dies right after its plan is written: the batch stays planned."""
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    monkeypatch.setenv("TIDEMARK_FAIL_AT", "after_plan")
    with pytest.raises(InjectedFault):
        run_dump(spark, config, settings, run, at(11))
    monkeypatch.delenv("TIDEMARK_FAIL_AT")


@pytest.fixture
def on_kafka(kafka: KafkaService, settings: Settings, tmp_path: Path) -> tuple[Any, Settings, str]:
    """A fresh table reading a fresh one-partition topic of the Apache Kafka broker."""
    config, own = fresh_table(settings, tmp_path)
    own = replace(own, kafka_bootstrap=kafka.listeners.plaintext)
    create_topic(kafka.listeners.plaintext, config.source.topic, 1)
    return config, own, kafka.listeners.plaintext


def test_a_rebuild_of_an_hour_read_from_an_earlier_topic_is_refused_never_reread(
    spark: Any, kafka: KafkaService, on_kafka: tuple[Any, Settings, str]
) -> None:
    """The hour was sealed from the first topic; the topic is re-created, rebased and refilled
    at the same offsets. A rebuild of the old hour must refuse by name, not swap in the new
    topic's records (they are in the table already, as the new topic's)."""
    config, settings, bootstrap = on_kafka
    topic = config.source.topic
    produce(bootstrap, topic, records([(0, at(10, m)) for m in range(4)] + [(0, at(11, 40))]))
    run_dump(spark, config, settings, "run-1", at(12))
    assert "2026-11-22T10" in run_seal(spark, config, settings, "run-1").sealed
    before, _, _ = landed(settings, config.table)

    _recreate(kafka, topic)
    produce(bootstrap, topic, records([(0, at(12, 10 + m)) for m in range(6)], prefix="n"))
    with pytest.raises(TopicRecreatedError):
        run_dump(spark, config, settings, "run-2", at(12, 30))
    resolve(config, settings, action="rebase", reason="topic re-created", by="ops", at=at(12, 40))
    assert run_dump(spark, config, settings, "run-3", at(12, 50)).rows == 6

    with pytest.raises(EarlierTopicError) as refused:
        run_rebuild(spark, config, settings, "rebuild-1", ["2026-11-22T10"])
    assert isinstance(refused.value, DataLossError)  # what the docs promise
    text = str(refused.value)
    assert config.table in text and "2026-11-22T10" in text and "offsets 0..4" in text and "untouched" in text
    after, _, _ = landed(settings, config.table)
    assert after == before + Counter({(0, o): 1 for o in range(6)})  # the old hour as it was, once


def test_a_planned_batch_is_not_read_from_a_topic_created_again_and_its_offsets_are_recorded_lost(
    spark: Any, kafka: KafkaService, on_kafka: tuple[Any, Settings, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch [0, 5) is planned, its job dies, the topic is re-created and refilled: the
    retry must not read the new topic's [0, 5) under the old topic's id. ``rebase`` closes the
    batch with its offsets recorded as lost, and the new topic is read once, from 0."""
    config, settings, bootstrap = on_kafka
    topic = config.source.topic
    produce(bootstrap, topic, records([(0, at(10, m)) for m in range(5)]))
    _fail_after_plan(monkeypatch, spark, config, settings, "run-1")
    _recreate(kafka, topic)
    fresh = produce(bootstrap, topic, records([(0, at(10, 20 + m)) for m in range(7)], prefix="n"))

    for run in ("run-1", "run-2"):  # the same run's retry, and a later run adopting the batch
        with pytest.raises(TopicRecreatedError, match=r"planned batch 0 .*--action rebase"):
            run_dump(spark, config, settings, run, at(11))
    assert landed(settings, config.table)[0] == Counter()
    resolve(config, settings, action="rebase", reason="topic re-created", by="ops", at=at(11, 5))
    (record,) = AuditLog(settings.state_location, config.table).records()
    assert record.action == "rebase" and record.batch_id == 0 and "never read" in record.offsets

    done = run_dump(spark, config, settings, "run-3", at(11, 10))
    assert done.offsets == {0: [0, 7]} and done.rows == 7
    rows, _, _ = landed(settings, config.table)
    assert rows == Counter((p, o) for p, o, _ in fresh)
    assert table_status(config, settings)["lost_to_retention"] == 5  # the old topic's [0, 5), recorded


def test_retention_inside_a_planned_batch_is_named_and_accept_loss_records_only_the_deleted_offsets(
    spark: Any, on_kafka: tuple[Any, Settings, str], kafka: KafkaService, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, settings, bootstrap = on_kafka
    topic = config.source.topic
    sent = produce(bootstrap, topic, records([(0, at(10, m)) for m in range(10)]))
    _fail_after_plan(monkeypatch, spark, config, settings, "run-1")
    _delete_records(kafka, topic, 0, 4)

    for _ in range(2):  # every retry the same, never a generic Spark error, never a silent skip
        with pytest.raises(OffsetsLostToRetentionError) as lost:
            run_dump(spark, config, settings, "run-1", at(11))
        text = str(lost.value)
        assert f"{topic}[0]" in text and "first missing 0" in text and "first available 4" in text
        assert "planned batch 0" in text and "--action accept-loss" in text
    with pytest.raises(ResolveError, match="still readable"):  # skip would drop offsets 4..9 too
        resolve(config, settings, action="skip", reason="poison", by="ops", at=at(11, 5))

    resolve(
        config, settings, action="accept-loss", reason="retention outran an outage", by="ops", at=at(11, 5)
    )
    done = run_dump(spark, config, settings, "run-2", at(11, 10))
    assert done.offsets == {0: [4, 10]} and done.rows == 6
    rows, _, _ = landed(settings, config.table)
    assert rows == Counter((p, o) for p, o, _ in sent if o >= 4)
    assert table_status(config, settings)["lost_to_retention"] == 4


def test_record_and_continue_records_retention_inside_a_planned_batch_by_itself(
    spark: Any, kafka: KafkaService, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, settings = fresh_table(settings, tmp_path, source__on_data_loss="record_and_continue")
    settings = replace(settings, kafka_bootstrap=kafka.listeners.plaintext)
    topic = config.source.topic
    create_topic(kafka.listeners.plaintext, topic, 1)
    sent = produce(kafka.listeners.plaintext, topic, records([(0, at(10, m)) for m in range(10)]))
    _fail_after_plan(monkeypatch, spark, config, settings, "run-1")
    _delete_records(kafka, topic, 0, 3)

    adopted = run_dump(spark, config, settings, "run-2", at(11))  # adopts batch 0: closes it, plans on
    assert adopted.offsets == {0: [3, 10]} and adopted.rows == 7
    assert run_dump(spark, config, settings, "run-1", at(11)).status == "already_committed"
    (record,) = AuditLog(settings.state_location, config.table).records()
    assert record.by == "tidemark" and record.action == "accept-loss" and "0..2" in record.offsets
    rows, _, _ = landed(settings, config.table)
    assert rows == Counter((p, o) for p, o, _ in sent if o >= 3)
    assert table_status(config, settings)["lost_to_retention"] == 3


def test_a_table_bound_to_its_topic_refuses_a_config_that_names_another(
    spark: Any, kafka: KafkaService, on_kafka: tuple[Any, Settings, str], tmp_path: Path
) -> None:
    """An edited ``source.topic`` (or another family's claim) must not read another topic from
    this table's offsets: it skipped the new topic's first records. ``rebase`` binds the table
    to the new topic, from its earliest offset, audited."""
    config, settings, bootstrap = on_kafka
    produce(bootstrap, config.source.topic, records([(0, at(10, m)) for m in range(3)]))
    run_dump(spark, config, settings, "run-1", at(11))
    other = f"{config.source.topic}_b"
    create_topic(bootstrap, other, 1)
    theirs = produce(bootstrap, other, records([(0, at(10, 10 + m)) for m in range(5)], prefix="b"))

    path = settings.conf_dir / f"{config.table}.yaml"
    data = yaml.safe_load(path.read_text())
    data["source"]["topic"] = other
    path.write_text(yaml.safe_dump(data))
    moved = load_table_file(path)
    with pytest.raises(
        TopicChangedError, match=rf"bound to topic {config.source.topic} .*reads topic {other}"
    ):
        run_dump(spark, moved, settings, "run-2", at(11, 10))
    resolve(moved, settings, action="rebase", reason="the table reads the new topic", by="ops", at=at(11, 20))
    done = run_dump(spark, moved, settings, "run-3", at(11, 30))
    assert done.offsets == {0: [0, 5]} and done.rows == 5
    rows, _, _ = landed(settings, config.table)
    assert sum(rows.values()) == 8 and sum(1 for p, o, _ in theirs) == 5
    assert CommitLog(settings.state_location, config.table).state().topic == other
    with pytest.raises(TopicChangedError):  # and now the old name is the stranger
        run_dump(spark, config, settings, "run-4", at(11, 40))


def test_status_tells_the_brokers_side_an_open_transaction_and_offsets_lost_or_at_risk(
    spark: Any, kafka: KafkaService, on_kafka: tuple[Any, Settings, str]
) -> None:
    """A transaction left open must not look like lag 0; retention closing in on the next
    offset, or past it, is said before the next plan stops on it."""
    from confluent_kafka import Producer

    config, settings, bootstrap = on_kafka
    topic = config.source.topic
    produce(bootstrap, topic, records([(0, at(10, m)) for m in range(20)]))
    run_dump(spark, config, settings, "run-1", at(11))
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-open", "linger.ms": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    for m in records([(0, at(10, 30 + m)) for m in range(3)], prefix="o"):
        producer.produce(topic, m.value, partition=0)
    producer.flush(30)

    status = table_status(config, settings)
    assert status["partitions"][0]["lag"] == 0  # read_committed: nothing stable to read ...
    assert status["broker"]["offsets_in_open_transactions"] == 3  # ... but 3 wait behind the open one
    assert status["broker"]["open_transaction_since"] is not None
    assert "open transaction: 3 offsets on MQ partitions [0]" in render(status)
    sent = emit_metrics(config, settings, gauge=lambda name, value: None)
    assert sent[f"tidemark.{config.table}.broker.offsets_in_open_transactions"] == 3
    producer.abort_transaction(30)

    produce(bootstrap, topic, records([(0, at(10, 40 + m)) for m in range(100)], prefix="b"))
    _delete_records(kafka, topic, 0, 19)  # one offset before the table's next (20): at risk
    status = table_status(config, settings)
    assert status["broker"]["mq_partitions_at_risk"] == [0] and "AT RISK on MQ partition 0" in render(status)
    _delete_records(kafka, topic, 0, 30)  # past it: lost, said before the next plan stops
    status = table_status(config, settings)
    assert status["partitions"][0]["lost"] == 10 and status["broker"]["offsets_lost_on_broker"] == 10
    assert "LOST to retention on MQ partition 0: offsets 20..29" in render(status)
    assert any("--action accept-loss" in line for line in report_data(config, settings)["broker"])


def test_a_read_that_meets_offset_out_of_range_fails_by_name_with_the_offsets(
    spark: Any, kafka: KafkaService, on_kafka: tuple[Any, Settings, str]
) -> None:
    """Retention that moves while a batch reads: the reader's task fails with librdkafka's
    ``Offset out of range`` inside a Spark error; the dump names it instead."""
    config, _, bootstrap = on_kafka
    topic = config.source.topic
    produce(bootstrap, topic, records([(0, at(10, m)) for m in range(10)]))
    plan = Plan(config.table, 0, "run-1", topic, at(11).isoformat(), (MqRange(0, 0, 10),))
    conf = {"bootstrap.servers": bootstrap}
    _delete_records(kafka, topic, 0, 6)  # as if between the plan's check and the read
    with pytest.raises(OffsetsLostToRetentionError) as named, named_read_failure(config, plan, conf):
        raise RuntimeError("reading [0] offsets 0..9: Broker: Offset out of range")  # the task's error
    assert "first missing 0" in str(named.value) and "first available 6" in str(named.value)
    assert isinstance(named.value.__cause__, RuntimeError)
    readable = replace(plan, ranges=(MqRange(0, 6, 10),))
    with pytest.raises(ValueError, match="other"), named_read_failure(config, readable, conf):
        raise ValueError("other")  # any other failure stands as it is
