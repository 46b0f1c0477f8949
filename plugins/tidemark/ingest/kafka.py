"""Broker access for planning and lag: partitions, earliest/latest offsets, group commits.

Reads use ``assign()`` only (no consumer-group membership, no rebalancing). Client properties
from the table YAML may reference the environment as ``${VAR}`` so secrets stay out of files,
and every message that shows properties masks secret values.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Mapping
from typing import Any

from tidemark.errors import BrokerRefusedError, BrokerUnavailableError, ConfigError
from tidemark.masking import mask_text

log = logging.getLogger(__name__)

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
TIMEOUT_S = 15.0


def client_properties(bootstrap: str, properties: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    """librdkafka config: bootstrap + table properties (``${VAR}`` resolved) + ``extra``."""
    resolved: dict[str, Any] = {"bootstrap.servers": bootstrap, "log_level": 3}
    resolved.update(resolve_env(properties, "source.kafka_properties"))
    resolved.update(extra)
    return resolved


def resolve_env(properties: Mapping[str, str], where: str) -> dict[str, str]:
    """``properties`` with every ``${VAR}`` read from the environment; a missing variable is a
    ConfigError naming the key (``where.key``) and the variable, never a value."""
    resolved: dict[str, str] = {}
    missing = []
    for key, value in properties.items():

        def lookup(match: re.Match[str], key: str = key) -> str:
            name = match.group(1)
            if name not in os.environ:
                missing.append(f"{where}.{key}: environment variable {name} is not set")
                return ""
            return os.environ[name]

        resolved[key] = _ENV_REF.sub(lookup, str(value))
    if missing:
        raise ConfigError("environment", missing)
    return resolved


class ClientErrors:
    """librdkafka's error events of one client (its ``error_cb``, served by ``poll``)."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.all_down_since: float | None = None

    def __call__(self, error: Any) -> None:
        self.seen.append(error)
        if error.name() == "_ALL_BROKERS_DOWN" and self.all_down_since is None:
            self.all_down_since = time.monotonic()

    def refusal(self) -> str | None:
        """The broker's reason when it refused this client (authentication, TLS, protocol)."""
        for error in self.seen:
            text = error.str()
            if error.name() in ("_AUTHENTICATION", "_SSL") or error.fatal():
                return text
            if error.name() == "_TRANSPORT" and ("SSL" in text or "security.protocol" in text):
                return text
        if self.all_down_since is not None and time.monotonic() - self.all_down_since > REFUSED_AFTER_S:
            return (
                "every connection closes at once (a listener that speaks another security.protocol, "
                "or a certificate it refuses)"
            )
        return None


# A broker that accepts TCP connections and closes each at once for this long refuses this client
REFUSED_AFTER_S = 4.0


def _consumer(conf: dict[str, Any], group: str = "tidemark-planner") -> tuple[Any, ClientErrors]:
    from confluent_kafka import Consumer

    errors = ClientErrors()
    consumer = Consumer(  # the planner's settings win over the table's properties
        {**conf, "group.id": group, "enable.auto.commit": False, "error_cb": errors}
    )
    return consumer, errors


def refused(conf: Mapping[str, Any], reason: str, topic: str = "") -> BrokerRefusedError:
    return BrokerRefusedError(
        str(conf["bootstrap.servers"]),
        str(conf.get("security.protocol", "PLAINTEXT")).upper(),
        str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", ""))),
        mask_text(reason),
        topic,
    )


def metadata(consumer: Any, errors: ClientErrors, conf: Mapping[str, Any], topic: str | None) -> Any:
    """The broker's metadata (of ``topic``, or all), failing in seconds with BrokerRefusedError
    when the broker refuses this client, instead of waiting out the timeout on a generic
    transport failure."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            return consumer.list_topics(topic, timeout=1.0)
        except KafkaException as exc:
            consumer.poll(0.1)  # serves error_cb
            reason = errors.refusal()
            if reason is not None:
                raise refused(conf, reason, topic or "") from None
            if time.monotonic() > deadline:
                raise _unavailable(conf, topic or "(all topics)", exc) from exc


def _unavailable(conf: Mapping[str, Any], topic: str, exc: BaseException) -> BrokerUnavailableError:
    return BrokerUnavailableError(
        f"broker not reachable at {conf['bootstrap.servers']} (topic {topic}): {exc}; "
        "check TIDEMARK_KAFKA_BOOTSTRAP / the broker (`tidemark-dev services status`)"
    )


def _probe(bootstrap: str) -> None:
    """Fail fast with a clear error when nothing listens (librdkafka would retry for minutes)."""

    errors = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
            return
        except (OSError, ValueError) as exc:
            errors.append(f"{server}: {exc}")
    raise BrokerUnavailableError(f"broker not reachable at {bootstrap}: {'; '.join(errors)}")


def list_topics(conf: dict[str, Any]) -> list[str]:
    """Every topic the broker lists (internal ``__`` topics left out): topic families'
    discovery."""
    from confluent_kafka import KafkaException

    _probe(conf["bootstrap.servers"])
    consumer, errors = _consumer(conf)
    try:
        found = metadata(consumer, errors, conf, None)
        return sorted(t for t, info in found.topics.items() if info.error is None and not t.startswith("__"))
    except KafkaException as exc:
        raise _unavailable(conf, "(all topics)", exc) from exc
    finally:
        consumer.close()


def partition_offsets(conf: dict[str, Any], topic: str) -> dict[int, tuple[int, int]]:
    """{partition: (earliest, latest)} for every partition of ``topic``."""
    from confluent_kafka import KafkaException, TopicPartition

    _probe(conf["bootstrap.servers"])
    consumer, errors = _consumer(conf)
    try:
        info = metadata(consumer, errors, conf, topic).topics.get(topic)
        if info is None or info.error is not None:
            raise BrokerUnavailableError(
                f"topic {topic!r} not found on {conf['bootstrap.servers']}"
                + (f": {info.error}" if info is not None else "")
            )
        result = {}
        for partition in sorted(info.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
            result[partition] = (int(low), int(high))
        return result
    except KafkaException as exc:
        raise _unavailable(conf, topic, exc) from exc
    finally:
        consumer.close()


def open_transactions(
    conf: dict[str, Any], topic: str, stable: Mapping[int, int]
) -> dict[int, tuple[int, int | None]]:
    """For each MQ partition whose high watermark is above its last stable offset (``stable``,
    what a read_committed plan ends at): (offsets waiting behind an open transaction, the
    epoch milliseconds of the first of them, when the transaction began, if it can be read)."""
    from confluent_kafka import KafkaException

    uncommitted = {**conf, "isolation.level": "read_uncommitted"}
    consumer, _ = _consumer(uncommitted, "tidemark-status")
    try:
        return _waiting(consumer, topic, stable)
    except KafkaException as exc:
        raise _unavailable(conf, topic, exc) from exc
    finally:
        consumer.close()


def _waiting(consumer: Any, topic: str, stable: Mapping[int, int]) -> dict[int, tuple[int, int | None]]:
    """``open_transactions`` with a read_uncommitted consumer: the high watermarks, then the
    timestamp of the first record above each last stable offset (up to 5 s in all)."""
    from confluent_kafka import TopicPartition

    waiting: dict[int, tuple[int, int | None]] = {}
    for partition, lso in stable.items():
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
        if int(high) > lso:
            waiting[partition] = (int(high) - lso, None)
    if waiting:
        consumer.assign([TopicPartition(topic, p, stable[p]) for p in waiting])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(t is None for _, t in waiting.values()):
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            partition = int(message.partition() or 0)
            if partition in waiting and waiting[partition][1] is None:
                waiting[partition] = (waiting[partition][0], int(message.timestamp()[1]))
    return waiting


def topic_id(conf: dict[str, Any], topic: str) -> str | None:
    """The broker's id of ``topic`` (Kafka 2.8+), or None where the broker does not say
    (a Kafka-protocol look-alike without DescribeTopicPartitions): then no identity check."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({k: v for k, v in conf.items() if k not in ("group.id", "enable.auto.commit")})
    try:
        (future,) = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S).values()
        found = future.result(TIMEOUT_S)
    except Exception as exc:  # an older broker or a look-alike: no id, no check
        log.debug("%s: no topic id from the broker: %s", topic, exc)
        return None
    identity = getattr(found, "topic_id", None)
    text = str(identity) if identity is not None else ""
    return text if text and text.strip("A") not in ("", "=") else None


def commit_group_offsets(
    conf: dict[str, Any], group: str, topic: str, ends: Mapping[int, int]
) -> dict[int, int]:
    """Commit ``ends`` for ``group`` where they move forward (lag monitoring only: the commit
    log is the truth, and a replayed or slow run must never move the group backwards); returns
    what was committed."""
    from confluent_kafka import TopicPartition

    consumer, _ = _consumer(conf, group)
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=TIMEOUT_S)
        current = {tp.partition: int(tp.offset) for tp in committed}
        forward = {p: o for p, o in ends.items() if o > current.get(p, -1)}
        if forward:
            consumer.commit(
                offsets=[TopicPartition(topic, p, o) for p, o in sorted(forward.items())], asynchronous=False
            )
        return forward
    finally:
        consumer.close()


def group_offsets(conf: dict[str, Any], group: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """Committed offsets of ``group`` (-1 where none)."""
    from confluent_kafka import TopicPartition

    consumer, _ = _consumer(conf, group)
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=TIMEOUT_S)
        return {tp.partition: int(tp.offset) for tp in committed}
    finally:
        consumer.close()
