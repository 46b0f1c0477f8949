"""Against the real Apache Kafka broker (``kafka`` fixture: KRaft from Maven Central's jars),
what a look-alike hides: transactions (aborted records and control markers are offsets without
a message; a read_committed plan stops at the last stable offset and never waits on an open
transaction), compaction (offsets missing inside a planned range), and the secured listeners
(SASL_SSL with SCRAM, mutual TLS): a dump and a seal run through them, and every way the broker
refuses a client fails the dump in seconds with a named error that never shows the secret."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.jobs import jvm_free_session
from tests.helpers.tables import at, fresh_table, landed
from tidemark.errors import BrokerRefusedError, OffsetsLostToRetentionError, TopicRecreatedError
from tidemark.family.discovery import discover_family
from tidemark.group.outcomes import OK, read_outcome
from tidemark.group.runner import GroupRun, run_group
from tidemark.ingest.dump import run_dump
from tidemark.ingest.resolve import resolve
from tidemark.observe.lineage import as_json, job_lineage
from tidemark.observe.metrics import emit_metrics
from tidemark.observe.report import render_report, report_data
from tidemark.observe.status import render, table_status
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.audit import AuditLog
from tidemark.state.commitlog import CommitLog
from tidemark.state.mode import TableWriter
from tidemark.stream.runner import run_stream
from tidemark_dev.generator import (
    Message,
    change_messages,
    create_topic,
    events,
    order_changes,
    produce,
    records,
    wait_until_stable,
)
from tidemark_dev.kafka import KafkaService, new_cluster_id
from tidemark_dev.local import SERVICES
from tidemark_dev.local import resolve as resolve_services
from tidemark_dev.tls import authority, pem_cert

pytestmark = pytest.mark.integration


def _transaction(
    kafka: KafkaService, topic: str, messages: list[Message], *, txn_id: str, commit: bool | None
) -> Any:
    """Produce ``messages`` in one transaction; commit it, abort it, or (None) leave it open
    and return the producer."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": kafka.listeners.plaintext, "transactional.id": txn_id, "linger.ms": 0}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for m in messages:
        producer.produce(topic, m.value, partition=m.partition)
    producer.flush(30)
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)
    if commit is not None:  # the markers are written after the answer: wait for them
        wait_until_stable(kafka.listeners.plaintext, topic, {m.partition or 0 for m in messages})
    return producer


def _event_ids(spark: Any, table: str) -> Counter[str]:
    spark.catalog.refreshTable(table)
    return Counter(r[0] for r in spark.sql(f"SELECT event_id FROM `{table}`").collect())


def _held(kafka: KafkaService, topic: str) -> list[tuple[int, bool]]:
    """(offset, is a tombstone) of each message partition 0 of ``topic`` holds now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": kafka.listeners.plaintext, "group.id": "t", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    held: list[tuple[int, bool]] = []
    try:
        while (m := consumer.poll(5)) is not None and not m.error():
            held.append((int(m.offset() or 0), m.value() is None))
        return held
    finally:
        consumer.close()


def _after_the_cleaner(
    kafka: KafkaService, topic: str, produced: int, roll: Message
) -> list[tuple[int, bool]]:
    """What a compacted topic holds once its cleaner removed some of the ``produced`` messages
    (``roll`` is produced every second meanwhile: a new segment, so older ones may be cleaned)."""
    deadline = time.monotonic() + 90
    while len(held := _held(kafka, topic)) >= produced and time.monotonic() < deadline:
        produce(kafka.listeners.plaintext, topic, [roll])
        time.sleep(1)
    assert len(held) < produced, "the cleaner never compacted the topic"
    return held


def test_transactions_committed_aborted_and_open_land_exactly(
    spark: Any, kafka: KafkaService, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path)
    settings = replace(settings, kafka_bootstrap=kafka.listeners.plaintext)
    topic = config.source.topic
    create_topic(kafka.listeners.plaintext, topic, 1)
    first = records([(0, at(10, m)) for m in range(3)], prefix="a")
    aborted = records([(0, at(10, 10 + m)) for m in range(2)], prefix="x")
    second = records([(0, at(10, 20 + m)) for m in range(3)], prefix="c")
    still_open = records([(0, at(10, 30 + m)) for m in range(2)], prefix="o")
    _transaction(kafka, topic, first, txn_id=f"{topic}-1", commit=True)
    _transaction(kafka, topic, aborted, txn_id=f"{topic}-2", commit=False)
    _transaction(kafka, topic, second, txn_id=f"{topic}-1", commit=True)
    open_producer = _transaction(kafka, topic, still_open, txn_id=f"{topic}-3", commit=None)

    started = time.monotonic()
    one = run_dump(spark, config, settings, "run-1", at(11))
    assert time.monotonic() - started < 120, "a plan waited on the open transaction"
    # read_committed: up to the last stable offset (the open transaction's first), no aborted record
    assert (one.read, one.rows, one.dirty, one.tombstones) == (6, 6, 0, 0)
    # 3 + marker + 2 aborted + marker + 3 + marker = 11 offsets, 6 messages; 11 is the open one's first
    assert one.offsets == {0: [0, 11]}

    open_producer.commit_transaction(30)
    del open_producer
    produce(kafka.listeners.plaintext, topic, records([(0, at(11, 40))], prefix="z"))
    two = run_dump(spark, config, settings, "run-2", at(12))
    assert (two.read, two.rows, two.dirty) == (3, 3, 0)
    assert two.offsets[0][0] == 11  # the next plan starts where the last one ended: no gap, no re-read

    assert "2026-11-22T10" in run_seal(spark, config, settings, "run-2").sealed
    want = Counter(f"{p}-{i}" for p, n in (("a", 3), ("c", 3), ("o", 2)) for i in range(n))
    got = _event_ids(spark, config.table)
    assert +(got - Counter({"z-0": 1})) == want  # every committed record once, no aborted one
    rows, dirty, _ = landed(settings, config.table)
    assert not dirty and sum(rows.values()) == 9
    state = CommitLog(settings.state_location, config.table).state()
    assert (state.rows, state.dirty) == (9, 0)
    first_batch = CommitLog(settings.state_location, config.table).commit(0)
    assert first_batch is not None
    assert (first_batch.spanned, first_batch.read, first_batch.without_message) == (11, 6, 5)
    assert "offsets spanned 11 == read 6 + without a message 5" in first_batch.reconciliation()
    shown = table_status(config, settings)
    assert shown["without_message"] == state.without_message
    assert shown["recent_batches"][0]["without_message"] == 5

    sent = emit_metrics(config, settings, gauge=lambda name, value: None)
    assert sent[f"tidemark.{config.table}.offsets_without_message"] == state.without_message


def test_a_compacted_topic_has_offsets_without_messages_inside_the_plan(
    spark: Any, kafka: KafkaService, settings: Settings, tmp_path: Path
) -> None:
    """The cleaner removes superseded keys: the planned range spans offsets no message holds."""
    config, settings = fresh_table(settings, tmp_path)
    settings = replace(settings, kafka_bootstrap=kafka.listeners.plaintext)
    topic = config.source.topic
    compact = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.0001",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "0",
    }
    create_topic(kafka.listeners.plaintext, topic, 1, compact)
    keyed = [
        Message(0, m.value, None, m.event_time, key=f"k{i % 3}".encode())
        for i, m in enumerate(records([(0, at(10, i)) for i in range(12)]))
    ]
    produce(kafka.listeners.plaintext, topic, keyed)

    roll = Message(0, keyed[-1].value, None, at(10, 59), key=b"roll")
    survivors = [o for o, _ in _after_the_cleaner(kafka, topic, len(keyed), roll)]
    done = run_dump(spark, config, settings, "run-1", at(11))
    assert done.offsets[0][0] == 0 and done.offsets[0][1] > max(survivors[:-1])
    assert done.read == done.rows == len([o for o, _ in _held(kafka, topic) if o < done.offsets[0][1]])
    assert done.read < done.offsets[0][1] - done.offsets[0][0]  # offsets without a message
    rows, dirty, _ = landed(settings, config.table)
    assert not dirty and set(rows) <= {(0, o) for o in range(done.offsets[0][1])}


@pytest.fixture(scope="module")
def secured_user(kafka: KafkaService) -> tuple[str, str]:
    user, password = "tidemark-job", "s3cret-Pa55-only-in-env"
    kafka.add_user(user, password)
    return user, password


def test_a_dump_and_a_seal_through_sasl_ssl_and_mutual_tls_never_show_the_secret(
    spark: Any,
    kafka: KafkaService,
    settings: Settings,
    tmp_path: Path,
    secured_user: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user, password = secured_user
    monkeypatch.setenv("TM_KAFKA_PASSWORD", password)
    sasl = {**kafka.sasl_properties(user, "${TM_KAFKA_PASSWORD}")}
    config, sasl_settings = fresh_table(settings, tmp_path, source__kafka_properties=sasl)
    sasl_settings = replace(sasl_settings, kafka_bootstrap=kafka.listeners.sasl_ssl)
    topic = config.source.topic
    create_topic(kafka.listeners.plaintext, topic, 2)
    sent = produce(
        kafka.listeners.plaintext,
        topic,
        records([(p, at(10, m)) for p in (0, 1) for m in (0, 20, 40)] + [(0, at(11, 40)), (1, at(11, 40))]),
    )
    # the read tasks in processes forked from this one, as a job on a local master runs them
    done = run_dump(jvm_free_session(), config, sasl_settings, "run-1", at(12))
    assert (done.read, done.rows) == (8, 8)
    assert "2026-11-22T10" in run_seal(spark, config, sasl_settings, "run-1").sealed
    rows, _, _ = landed(sasl_settings, config.table)
    assert rows == Counter((p, o) for p, o, _ in sent)

    # the same topic through the mutual-TLS listener, as another table, read by Spark's tasks
    mtls_config, mtls_settings = fresh_table(
        settings, tmp_path, source__kafka_properties=kafka.mtls_properties()
    )
    mtls_config = mtls_config.model_copy(
        update={"source": mtls_config.source.model_copy(update={"topic": topic})}
    )
    mtls_settings = replace(mtls_settings, kafka_bootstrap=kafka.listeners.ssl)
    assert run_dump(spark, mtls_config, mtls_settings, "run-1", at(12)).rows == 8

    # a rebuild re-reads the hour's offsets through the same listener

    (rebuilt,) = run_rebuild(spark, config, sasl_settings, "rebuild-1", ["2026-11-22T10"]).hours
    assert rebuilt["status"] == "rebuilt" and rebuilt["rows"] == 6
    shown = [render(table_status(config, sasl_settings)), str(table_status(config, sasl_settings))]
    shown.append(render_report(report_data(config, sasl_settings, as_of=at(13))))
    # the lineage events the operators emit name the source by bootstrap and topic only
    lineage = [
        as_json(job_lineage(job, config, sasl_settings, run))
        for job, run in (("dump", "run-1"), ("seal", "run-1"), ("rebuild", "rebuild-1"))
    ]
    assert all(d["inputs"] or d["outputs"] for d in lineage), lineage
    shown += [json.dumps(d) for d in lineage]
    assert all(password not in text for text in shown)

    leaked = [str(p) for p in sasl_settings.home.rglob("*") if p.is_file() and _holds(p, password)]
    leaked += [
        str(p)
        for p in Path(str(sasl_settings.state_location)).rglob("*")
        if p.is_file() and _holds(p, password)
    ]
    assert leaked == [] and password not in caplog.text


def _holds(path: Path, secret: str) -> bool:
    try:
        return secret.encode() in path.read_bytes()
    except OSError:
        return False


def test_every_refusal_of_the_broker_fails_the_dump_in_seconds_naming_it_never_the_secret(
    spark: Any,
    kafka: KafkaService,
    settings: Settings,
    tmp_path: Path,
    secured_user: tuple[str, str],
) -> None:
    user, password = secured_user
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(pem_cert(authority("not the broker's CA")[1]))
    expired_cert, expired_key = kafka.tls.client_signed(tmp_path / "expired", expired=True)
    wrong = "Wr0ng-pa55word-xyz"
    cases: dict[str, tuple[str, dict[str, str], str]] = {
        "wrong password": (kafka.listeners.sasl_ssl, kafka.sasl_properties(user, wrong), "SCRAM-SHA-512"),
        "unknown user": (kafka.listeners.sasl_ssl, kafka.sasl_properties("nobody", wrong), "SCRAM-SHA-512"),
        "refused mechanism": (
            kafka.listeners.sasl_ssl,
            {**kafka.sasl_properties(user, password), "sasl.mechanism": "PLAIN"},
            "PLAIN",
        ),
        "untrusted broker certificate": (
            kafka.listeners.sasl_ssl,
            {**kafka.sasl_properties(user, password), "ssl.ca.location": str(other_ca)},
            "SCRAM-SHA-512",
        ),
        "expired client certificate": (
            kafka.listeners.ssl,
            {
                **kafka.mtls_properties(),
                "ssl.certificate.location": str(expired_cert),
                "ssl.key.location": str(expired_key),
            },
            "",
        ),
        "plaintext client on the TLS listener": (kafka.listeners.ssl, {}, ""),
    }
    for case, (bootstrap, properties, mechanism) in cases.items():
        config, own = fresh_table(settings, tmp_path, source__kafka_properties=properties)
        own = replace(own, kafka_bootstrap=bootstrap)
        started = time.monotonic()
        with pytest.raises(BrokerRefusedError) as refused:
            run_dump(spark, config, own, "run-1", at(12))
        assert time.monotonic() - started < 30, f"{case}: not refused in seconds"
        text = str(refused.value)
        assert bootstrap in text and properties.get("security.protocol", "PLAINTEXT") in text, (case, text)
        assert mechanism in text, (case, text)
        assert wrong not in text and password not in text, (case, text)


def test_offsets_lost_to_retention_stop_the_table_until_the_loss_is_accepted(
    spark: Any, kafka: KafkaService, settings: Settings, tmp_path: Path
) -> None:
    """DeleteRecords moves the log start as retention does: the next planned offsets are gone."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    config, settings = fresh_table(settings, tmp_path)
    settings = replace(settings, kafka_bootstrap=kafka.listeners.plaintext)
    topic = config.source.topic
    create_topic(kafka.listeners.plaintext, topic, 1)
    produce(kafka.listeners.plaintext, topic, records([(0, at(10, m)) for m in range(5)]))
    assert run_dump(spark, config, settings, "run-1", at(11)).rows == 5
    produce(kafka.listeners.plaintext, topic, records([(0, at(10, 10 + m)) for m in range(5)], prefix="b"))
    admin = AdminClient({"bootstrap.servers": kafka.listeners.plaintext})
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, 8)]).values()
    deleted.result(30)

    with pytest.raises(OffsetsLostToRetentionError) as lost:
        run_dump(spark, config, settings, "run-2", at(11, 10))
    text = str(lost.value)
    assert (
        config.table in text
        and f"{topic}[0]" in text
        and "first missing 5" in text
        and "first available 8" in text
    )
    assert "--action accept-loss" in text
    with pytest.raises(OffsetsLostToRetentionError):  # a retry: the same, never a silent skip
        run_dump(spark, config, settings, "run-2", at(11, 10))

    resolve(
        config, settings, action="accept-loss", reason="retention outran an outage", by="ops", at=at(11, 20)
    )
    (record,) = [
        r for r in AuditLog(settings.state_location, config.table).records() if r.action == "accept-loss"
    ]
    assert record.by == "ops" and "5..7" in record.offsets
    after = run_dump(spark, config, settings, "run-3", at(11, 30))
    assert after.rows == 2 and after.offsets == {0: [8, 10]}
    status = table_status(config, settings)
    assert (status["rows"], status["lost_to_retention"]) == (7, 3)


def test_a_topic_created_again_stops_the_table_until_rebased_never_a_silent_skip(
    spark: Any, kafka: KafkaService, settings: Settings, tmp_path: Path
) -> None:
    """The new topic holds more records than the old one's committed end: without its id the
    plan would start at that end and skip the new topic's first records."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    config, settings = fresh_table(settings, tmp_path)
    settings = replace(settings, kafka_bootstrap=kafka.listeners.plaintext)
    topic = config.source.topic
    create_topic(kafka.listeners.plaintext, topic, 1)
    produce(kafka.listeners.plaintext, topic, records([(0, at(10, m)) for m in range(3)]))
    assert run_dump(spark, config, settings, "run-1", at(11)).offsets == {0: [0, 3]}

    admin = AdminClient({"bootstrap.servers": kafka.listeners.plaintext})
    (gone,) = admin.delete_topics([topic]).values()
    gone.result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            create_topic(kafka.listeners.plaintext, topic, 1)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    again = produce(
        kafka.listeners.plaintext, topic, records([(0, at(10, 30 + m)) for m in range(5)], prefix="n")
    )

    with pytest.raises(TopicRecreatedError, match=rf"{config.table}: topic {topic} was created again"):
        run_dump(spark, config, settings, "run-2", at(11, 10))
    resolve(config, settings, action="rebase", reason="the topic was recreated", by="ops", at=at(11, 20))
    done = run_dump(spark, config, settings, "run-3", at(11, 30))
    assert done.offsets == {0: [0, 5]} and done.rows == 5
    rows, _, _ = landed(settings, config.table)
    # the old topic's 3 rows and the new topic's 5 (its offsets 0..2 again: another topic's)
    assert sum(rows.values()) == 8 and {(p, o) for p, o, _ in again} <= set(rows)


def test_a_broker_restart_during_a_dump_and_a_seal_ends_exact(
    spark: Any, kafka: KafkaService, settings: Settings, tmp_path: Path
) -> None:
    """The broker is stopped (data kept) as soon as the dump's plan is written, while the read
    tasks start, and started again: the dump waits for it or fails, and its retry is exact."""

    config, settings = fresh_table(settings, tmp_path)
    settings = replace(settings, kafka_bootstrap=kafka.listeners.plaintext)
    topic = config.source.topic
    create_topic(kafka.listeners.plaintext, topic, 2)
    sent = produce(
        kafka.listeners.plaintext,
        topic,
        list(events(20_000, start=at(10), partitions=2, seed=3)),
        one_per_request=False,
    )
    sent += produce(kafka.listeners.plaintext, topic, records([(0, at(11, 40)), (1, at(11, 40))], prefix="z"))
    outcome: dict[str, Any] = {}

    def dump(run_id: str) -> None:
        try:
            outcome[run_id] = run_dump(spark, config, settings, run_id, at(12))
        except Exception as exc:  # the broker went away: this run fails, its retry completes
            outcome[run_id] = exc

    log = CommitLog(settings.state_location, config.table)
    worker = threading.Thread(target=dump, args=("run-1",))
    worker.start()
    deadline = time.monotonic() + 120
    while log.plan(0) is None and time.monotonic() < deadline and worker.is_alive():
        time.sleep(0.02)
    kafka.stop()
    time.sleep(2)
    kafka.start()
    worker.join(300)
    assert not worker.is_alive()
    if isinstance(outcome["run-1"], Exception):
        dump("run-1")  # the retry of the same run
    assert not isinstance(outcome["run-1"], Exception), outcome["run-1"]
    rows, dirty, _ = landed(settings, config.table)
    assert rows + dirty == Counter((p, o) for p, o, _ in sent)

    sealing = threading.Thread(target=lambda: outcome.update(seal=run_seal(spark, config, settings, "run-1")))
    sealing.start()
    kafka.stop()  # the seal reads no broker: it never notices
    kafka.start()
    sealing.join(300)
    assert "2026-11-22T10" in outcome["seal"].sealed
    sealed = [m for _, _, m in sent if m.event_time is not None and m.event_time < at(11)]
    assert sum(_event_ids(spark, config.table).values()) == len(sealed)


def test_family_discovery_through_sasl_ssl_and_a_refusal_named(
    kafka: KafkaService,
    settings: Settings,
    tmp_path: Path,
    secured_user: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A family's discovery lists the broker's topics with the family's own client properties."""

    user, password = secured_user
    monkeypatch.setenv("TM_KAFKA_PASSWORD", password)
    prefix = f"sec{uuid.uuid4().hex[:6]}"
    conf_dir = tmp_path / "conf"
    data = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "conf" / "tables" / "events.yaml").read_text()
    )
    data.pop("table")
    data["source"].pop("topic")
    data["source"]["topic_pattern"] = rf"{prefix}\.[a-z]+"
    data["source"]["kafka_properties"] = kafka.sasl_properties(user, "${TM_KAFKA_PASSWORD}")
    data.update({"family": "secured", "table": "{topic}"})
    (conf_dir / "families").mkdir(parents=True)
    (conf_dir / "families" / "secured.yaml").write_text(yaml.safe_dump(data))
    for topic in (f"{prefix}.web", f"{prefix}.app"):
        create_topic(kafka.listeners.plaintext, topic, 1)
    secured = replace(settings, conf_dir=conf_dir, kafka_bootstrap=kafka.listeners.sasl_ssl)
    found = discover_family("secured", secured, at=at(12))
    assert found.new == [f"{prefix}.app", f"{prefix}.web"]

    monkeypatch.setenv("TM_KAFKA_PASSWORD", "not-the-password")
    with pytest.raises(BrokerRefusedError, match=r"SASL_SSL, mechanism SCRAM-SHA-512") as refused:
        discover_family("secured", secured, at=at(13))
    assert "not-the-password" not in str(refused.value)


def test_a_groups_dump_and_seal_through_sasl_ssl(
    spark: Any,
    kafka: KafkaService,
    settings: Settings,
    tmp_path: Path,
    secured_user: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two tables of one group, one Spark application per job, every client through SASL_SSL."""

    user, password = secured_user
    monkeypatch.setenv("TM_KAFKA_PASSWORD", password)
    group = f"g_sec_{tmp_path.name[-6:].lower().replace('-', '_')}"
    sasl = kafka.sasl_properties(user, "${TM_KAFKA_PASSWORD}")
    made = [fresh_table(settings, tmp_path, group=group, source__kafka_properties=sasl) for _ in range(2)]
    configs = [c for c, _ in made]
    secured = replace(made[0][1], kafka_bootstrap=kafka.listeners.sasl_ssl)
    sent = {}
    for config in configs:
        create_topic(kafka.listeners.plaintext, config.source.topic, 2)
        sent[config.table] = produce(
            kafka.listeners.plaintext,
            config.source.topic,
            records(
                [(p, at(10, m)) for p in (0, 1) for m in (5, 25, 45)] + [(0, at(11, 50)), (1, at(11, 40))]
            ),
        )
    dump = run_group(spark, configs, secured, GroupRun(group, "dump", "run-1", at(12), at(12)))
    assert dump["failed"] == []
    seal = run_group(spark, configs, secured, GroupRun(group, "seal", "run-1", at(12), at(12)))
    assert seal["failed"] == []
    for config in configs:
        outcome = read_outcome(secured.state_dir, config.table, "seal", "run-1")
        assert outcome is not None and outcome.status == OK
        rows, _, _ = landed(secured, config.table)
        assert rows == Counter((p, o) for p, o, _ in sent[config.table])

    # a rotated password the job was not given: each table's outcome names the refusal, not the secret
    wrong = "an-0ld-pa55word-rotated"
    monkeypatch.setenv("TM_KAFKA_PASSWORD", wrong)
    refused = run_group(spark, configs, secured, GroupRun(group, "dump", "run-2", at(13), at(13)))
    assert sorted(refused["failed"]) == sorted(c.table for c in configs)
    for config in configs:
        failure = read_outcome(secured.state_dir, config.table, "dump", "run-2")
        assert failure is not None and failure.error_type == "BrokerRefusedError"
        assert "SASL_SSL" in failure.detail and wrong not in failure.detail and password not in failure.detail


def test_the_stream_through_sasl_ssl_on_apache_kafka(
    spark: Any,
    kafka: KafkaService,
    settings: Settings,
    tmp_path: Path,
    secured_user: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The upgrade path's micro-batches read through the secured listener, read_committed: an
    aborted transaction in the topic never lands."""

    user, password = secured_user
    monkeypatch.setenv("TM_KAFKA_PASSWORD", password)
    config, own = fresh_table(
        settings, tmp_path, source__kafka_properties=kafka.sasl_properties(user, "${TM_KAFKA_PASSWORD}")
    )
    own = replace(own, kafka_bootstrap=kafka.listeners.sasl_ssl)
    topic = config.source.topic
    create_topic(kafka.listeners.plaintext, topic, 1)
    kept = produce(kafka.listeners.plaintext, topic, records([(0, at(10, m)) for m in range(4)]))
    _transaction(kafka, topic, records([(0, at(10, 30))], prefix="x"), txn_id=f"{topic}-x", commit=False)
    kept += produce(
        kafka.listeners.plaintext, topic, records([(0, at(10, 40 + m)) for m in range(2)], prefix="b")
    )
    TableWriter(own.state_dir, config.table).switch("stream", by="test", reason="test", at=at(12).isoformat())
    result = run_stream(
        spark, config, own, "stream-1", clock=lambda: at(12), until_caught_up=True, trigger_interval_s=0.5
    )
    assert "caught up" in result["reason"]
    rows, dirty, _ = landed(own, config.table)
    assert not dirty and rows == Counter((p, o) for p, o, _ in kept)


def test_a_compacted_cdc_topic_lands_the_surviving_changes_and_its_tombstones(
    spark: Any, kafka: KafkaService, settings: Settings, tmp_path: Path
) -> None:
    """A CDC topic as Debezium's users run it: compacted, keyed by the row's key, a tombstone
    after each delete. After the cleaner ran, the dump reads what survives: every read message
    is a row or a tombstone, the compacted offsets are offsets without a message."""

    config, settings = fresh_table(settings, tmp_path, template="orders")
    settings = replace(settings, kafka_bootstrap=kafka.listeners.plaintext)
    topic = config.source.topic
    compact = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.0001",
        "min.compaction.lag.ms": "0",
    }
    create_topic(kafka.listeners.plaintext, topic, 1, compact)
    changes = order_changes(60, start=at(10), span=at(10, 50) - at(10), seed=5)
    keyed: list[Message] = []
    for m in change_messages(changes, partitions=1):
        key = str(json.loads(m.value or b"{}")["order_id"]).encode()
        keyed.append(replace(m, key=key))
        if json.loads(m.value or b"{}")["op"] == "d":
            keyed.append(Message(0, None, None, None, key=key))  # the tombstone after a delete
    produce(kafka.listeners.plaintext, topic, keyed)

    held = _after_the_cleaner(kafka, topic, len(keyed), replace(keyed[0], key=b"roll"))
    tombstones = sum(1 for _, tombstone in held if tombstone)
    assert tombstones, "no delete among the changes: no tombstone to keep"
    done = run_dump(spark, config, settings, "run-1", at(11))
    assert done.read == done.rows + done.dirty + done.tombstones + done.late
    assert done.read < done.offsets[0][1]  # offsets without a message: the compacted ones
    assert (done.read, done.tombstones) == (len(_held(kafka, topic)), tombstones) and done.dirty == 0


def test_a_cluster_id_that_starts_with_a_dash_formats(settings: Settings, tmp_path: Path) -> None:
    """One random cluster id in 64 starts with ``-``; the storage tool must take it as the id,
    not as an option (a CI run lost its broker to that once)."""
    service = KafkaService(replace(settings, home=tmp_path, kafka_bootstrap="127.0.0.1:1"))
    service.root.mkdir(parents=True)
    service.properties_file.write_text(service._properties())
    service._format("-" + new_cluster_id()[1:])
    meta = (service.data_dir / "meta.properties").read_text()
    assert "cluster.id=-" in meta


def test_the_default_local_broker_keeps_its_topics_across_down_and_up(
    spark: Any, kafka: KafkaService, settings: Settings, tmp_path: Path
) -> None:
    """`make up` -> ingest -> `make down` -> `make up` -> ingest: the local broker of `make up`
    is Apache Kafka, whose topics and offsets outlive a restart (tansu's memory storage lost them,
    and the next run failed with `topic 'events' not found`)."""
    broker = SERVICES[resolve_services([])[0]](kafka.settings)  # what `make up` / `make down` manage
    assert isinstance(broker, KafkaService)
    config, settings = fresh_table(settings, tmp_path)
    settings = replace(settings, kafka_bootstrap=kafka.listeners.plaintext)
    topic = config.source.topic
    create_topic(kafka.listeners.plaintext, topic, 2)
    produce(kafka.listeners.plaintext, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(3)]))
    one = run_dump(spark, config, settings, "run-1", at(11))
    assert one.read == 6

    assert broker.stop() is True  # `make down`
    assert not broker.status().running
    assert broker.start().answering  # `make up`
    produce(kafka.listeners.plaintext, topic, records([(p, at(10, 30)) for p in (0, 1)], prefix="b"))
    two = run_dump(spark, config, settings, "run-2", at(12))
    assert two.read == 2  # the topic, its records and the table's offsets survived the restart
    assert two.offsets == {0: [3, 4], 1: [3, 4]}
