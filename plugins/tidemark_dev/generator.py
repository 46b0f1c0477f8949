"""A realistic generated clickstream for the demo, tests and benchmarks.

Deterministic for a seed (no clock inside: the caller passes the start time). Produces one
message per request by default, because tansu's high watermark lags the tail of a multi-record
producer batch (see STACK.md); the delivery reports are the truth of what landed where.
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

DIRTY_KINDS = ("invalid_json", "missing_field", "type_mismatch", "null_event_time", "oversized")
APPS = ("web", "ios", "android")
EVENT_TYPES = ("view", "click", "add_to_cart", "purchase")


@dataclass(frozen=True)
class Message:
    partition: int
    value: bytes | None  # None: a tombstone
    dirty_kind: str | None
    event_time: datetime | None
    key: bytes | None = None  # a compacted topic keeps the last message of each key


def events(
    count: int,
    *,
    start: datetime,
    partitions: int = 4,
    span: timedelta = timedelta(hours=1),
    disorder: timedelta = timedelta(minutes=2),
    dirty_fraction: float = 0.0,
    seed: int = 7,
    max_message_bytes: int = 1024 * 1024,
) -> Iterator[Message]:
    """``count`` events spread over ``span`` from ``start``, round-robin over partitions, each
    jittered back by up to ``disorder``; ``dirty_fraction`` of them broken in rotating ways."""
    rng = random.Random(seed)
    for i in range(count):
        partition = i % partitions
        base = start + span * (i / max(count, 1))
        event_time = base - timedelta(seconds=rng.uniform(0, disorder.total_seconds()))
        record: dict[str, Any] = {
            "event_id": f"e{seed}-{i}",
            "user_id": rng.randint(1, 50_000),
            "app": rng.choice(APPS),
            "event_type": rng.choice(EVENT_TYPES),
            "amount": f"{rng.uniform(0, 500):.2f}",
            "event_time": event_time.isoformat(),
        }
        kind = None
        if dirty_fraction and rng.random() < dirty_fraction:
            kind = DIRTY_KINDS[i % len(DIRTY_KINDS)]
        if kind == "invalid_json":
            yield Message(partition, b'{"event_id": "broken', kind, None)
            continue
        if kind == "missing_field":
            del record["event_type"]
        elif kind == "type_mismatch":
            record["user_id"] = "not-a-number"
        elif kind == "null_event_time":
            record["event_time"] = None
        elif kind == "oversized":
            record["padding"] = "x" * (max_message_bytes + 1)
        yield Message(partition, json.dumps(record).encode(), kind, event_time if kind is None else None)


def produce(
    bootstrap: str,
    topic: str,
    messages: Iterator[Message] | list[Message],
    *,
    one_per_request: bool = True,
    producer_conf: dict[str, Any] | None = None,
) -> list[tuple[int, int, Message]]:
    """Produce messages; return (partition, offset, message) from the delivery reports."""
    from confluent_kafka import Producer

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 0,
        "message.max.bytes": 16 * 1024 * 1024,
    }
    if one_per_request:
        conf["batch.num.messages"] = 1
    conf.update(producer_conf or {})
    delivered, errors, remaining = _send(Producer(conf), topic, messages)
    if errors or remaining:
        raise RuntimeError(f"produce to {topic} failed: {remaining} undelivered, errors {errors[:3]}")
    return delivered


def _send(
    producer: Any, topic: str, messages: Iterable[Message]
) -> tuple[list[tuple[int, int, Message]], list[str], int]:
    """Produce and flush ``messages``: (partition, offset, message) from the delivery reports,
    the delivery errors, and how many were left undelivered."""
    delivered: list[tuple[int, int, Message]] = []
    errors: list[str] = []

    def report(err: Any, msg: Any, *, message: Message) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset(), message))

    for message in messages:
        while True:
            try:
                producer.produce(
                    topic,
                    value=message.value,
                    key=message.key,
                    partition=message.partition,
                    on_delivery=functools.partial(report, message=message),
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    return delivered, errors, remaining


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    """Create ``topic`` (no-op if it exists), with topic ``config`` (e.g. max.message.bytes)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})]
    )[topic]
    try:
        future.result(15)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise


def recreate_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again under the same name: a new topic id, its offsets
    from 0 again (the broker finishes a deletion in the background: the creation is retried)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer: its handle serves it
    (gone,) = admin.delete_topics([topic]).values()
    gone.result(30)
    deadline = time.monotonic() + 60
    while True:
        try:
            create_topic(bootstrap, topic, partitions)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    """DeleteRecords: the log start of ``topic[partition]`` moves to ``before``, as retention
    would move it."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (deleted,) = admin.delete_records([TopicPartition(topic, partition, before)]).values()
    deleted.result(30)


def records(items: list[tuple[Any, ...]], *, prefix: str = "r") -> list[Message]:
    """Hand-placed events: (MQ partition, event time[, field overrides]) each; for tests that
    need a precise watermark per partition."""
    out = []
    for i, item in enumerate(items):
        partition: int = item[0]
        event_time: datetime = item[1]
        record: dict[str, Any] = {
            "event_id": f"{prefix}-{i}",
            "user_id": i,
            "app": "web",
            "event_type": "view",
            "amount": "1.00",
            "event_time": event_time.isoformat(),
        }
        if len(item) > 2:
            record.update(item[2])
        out.append(Message(partition, json.dumps(record).encode(), None, event_time))
    return out


# -- change data capture (the orders example) ---------------------------------------------------
ORDER_STATUSES = ("created", "paid", "shipped", "delivered")


def order_changes(
    count: int,
    *,
    start: datetime,
    span: timedelta = timedelta(hours=1),
    first_order_id: int = 1,
    existing: dict[int, dict[str, Any]] | None = None,
    new_fraction: float = 0.4,
    delete_fraction: float = 0.1,
    seed: int = 11,
) -> list[dict[str, Any]]:
    """``count`` committed changes of an orders table in commit order, ``updated_at`` rising
    over ``span``: inserts (op c) of new ids from ``first_order_id``, updates (u) and deletes
    (d) of live ones, each with the order's next version. ``existing`` is the state to start
    from (e.g. what a bootstrap read); it is not modified."""
    rng = random.Random(seed)
    state = {k: dict(v) for k, v in (existing or {}).items()}
    live = sorted(state)
    next_id = max([first_order_id - 1, *live]) + 1
    changes = []
    for i in range(count):
        at = start + span * (i / max(count, 1))
        roll = rng.random()
        row: dict[str, Any]
        if not live or roll < new_fraction:
            order_id, next_id = next_id, next_id + 1
            row = {
                "order_id": order_id,
                "version": 1,
                "customer_id": rng.randint(1, 5_000),
                "status": ORDER_STATUSES[0],
                "amount": f"{rng.uniform(5, 900):.2f}",
            }
            op = "c"
            live.append(order_id)
        else:
            order_id = live[rng.randrange(len(live))]
            row = dict(state[order_id])
            row["version"] = int(row["version"]) + 1
            if roll < new_fraction + delete_fraction:
                op = "d"
                live.remove(order_id)
            else:
                op = "u"
                row["status"] = rng.choice(ORDER_STATUSES[1:])
                row["amount"] = f"{rng.uniform(5, 900):.2f}"
        row["updated_at"] = at.isoformat()
        state[order_id] = row
        changes.append({"op": op, **row})
    return changes


def state_after(
    changes: list[dict[str, Any]], start: dict[int, dict[str, Any]] | None = None
) -> dict[int, dict[str, Any]]:
    """The table after applying ``changes`` in commit order: what the source database holds."""
    state = {k: dict(v) for k, v in (start or {}).items()}
    for change in changes:
        row = {k: v for k, v in change.items() if k != "op"}
        if change["op"] == "d":
            state.pop(change["order_id"], None)
        else:
            state[change["order_id"]] = row
    return state


def change_messages(
    changes: list[dict[str, Any]],
    *,
    partitions: int = 4,
    duplicates: float = 0.0,
    reorder: float = 0.0,
    seed: int = 13,
) -> list[Message]:
    """One message per change, keyed by order id (partition = id % partitions, so each
    order's changes keep their order) - except that ``duplicates`` of them are sent twice and
    ``reorder`` of them swap places with the next change of the same partition, which puts
    versions out of order as a misbehaving capture would."""
    rng = random.Random(seed)
    lanes: list[list[dict[str, Any]]] = [[] for _ in range(partitions)]
    for change in changes:
        lanes[change["order_id"] % partitions].append(change)
    for lane in lanes:
        for i in range(len(lane) - 1):
            if rng.random() < reorder:
                lane[i], lane[i + 1] = lane[i + 1], lane[i]
    placed = []  # (position in its lane, partition, message): lanes interleaved, order kept
    for p, lane in enumerate(lanes):
        position = 0
        for change in lane:
            message = Message(
                p, json.dumps(change).encode(), None, datetime.fromisoformat(change["updated_at"])
            )
            copies = 2 if rng.random() < duplicates else 1
            for _ in range(copies):
                placed.append((position, p, message))
                position += 1
    return [message for _, _, message in sorted(placed, key=lambda item: item[:2])]


def produce_in_transaction(
    bootstrap: str, topic: str, messages: list[Message], *, transactional_id: str, commit: bool
) -> list[tuple[int, int, Message]]:
    """Produce ``messages`` in one Kafka transaction, then commit or abort it; returns (partition,
    offset, message) of the committed ones ([] when aborted: those offsets hold no message a
    read_committed consumer sees). Needs a broker with transactions (Apache Kafka)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            "message.max.bytes": 16 * 1024 * 1024,  # oversized dirty records of the tests
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    delivered, errors, remaining = _send(producer, topic, messages)
    if errors or remaining:
        producer.abort_transaction(30)
        raise RuntimeError(f"produce to {topic} failed: {remaining} undelivered, errors {errors[:3]}")
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)
    wait_until_stable(bootstrap, topic, {p for p, _, _ in delivered})
    return delivered if commit else []


def wait_until_stable(bootstrap: str, topic: str, partitions: Iterable[int], timeout_s: float = 60.0) -> None:
    """Wait until each partition's last stable offset is its high watermark. Apache Kafka answers
    a commit or an abort once the coordinator logged the decision and writes the partitions'
    markers after it, so for a moment a read_committed reader still stops before the ended
    transaction (a test that reads right away would see a shorter topic than it produced).
    Only for topics that no other producer holds a transaction open on."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    latest = {TopicPartition(topic, p): OffsetSpec.latest() for p in sorted(set(partitions))}
    if not latest:
        return

    def ends(level: Any) -> dict[int, int]:
        answers = admin.list_offsets(latest, isolation_level=level, request_timeout=10)
        return {tp.partition: future.result().offset for tp, future in answers.items()}

    deadline = time.monotonic() + timeout_s
    while (stable := ends(IsolationLevel.READ_COMMITTED)) != (high := ends(IsolationLevel.READ_UNCOMMITTED)):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{topic}: last stable offsets {stable} never reached the high watermarks {high}"
            )
        time.sleep(0.05)
