"""A table's source identity: which topic its offsets belong to.

Offsets are positions, not messages: offset 7 of ``events[0]`` means another record once the
topic was deleted and created again, and nothing at all on another topic. So the commit log
binds a table to its topic from the first plan: every plan and commit records the topic's name
and, where the broker has them (Kafka 2.8+), its id. Every path that reads the broker checks the
binding before it reads and again before anything becomes visible (``check_binding``); a table
whose config now names another topic, or whose topic was created again, stops with a named
error whose one way out is ``tidemark resolve --action rebase`` (audited).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidemark.errors import (
    DataLossError,
    OffsetsLostToRetentionError,
    OffsetsWentBackError,
    TidemarkError,
    TopicChangedError,
    TopicRecreatedError,
)
from tidemark.ingest.kafka import partition_offsets, topic_id

if TYPE_CHECKING:
    from tidemark.config import TableConfig
    from tidemark.state.batches import Plan
    from tidemark.state.commitlog import CommitLog, LogState


@dataclass(frozen=True)
class SourceIdentity:
    """A topic's name and, where the broker gives one, its id."""

    topic: str
    topic_id: str | None = None

    def describe(self) -> str:
        return f"{self.topic} (topic id {self.topic_id})" if self.topic_id else self.topic


def broker_identity(conf: dict[str, Any], topic: str) -> SourceIdentity:
    """The identity the broker gives ``topic`` now."""
    return SourceIdentity(topic, topic_id(conf, topic))


def of_plan(plan: Plan) -> SourceIdentity:
    return SourceIdentity(plan.topic, plan.topic_id)


def bound_identity(commit_log: CommitLog, state: LogState) -> SourceIdentity | None:
    """The table's claim: the topic (and id) of its last commit, else of its pending first
    plan; None for a table that never planned."""
    topic = commit_log.bound_topic(state)
    if topic is None:
        return None
    if state.last_committed >= 0:
        return SourceIdentity(topic, state.topic_id)
    pending = commit_log.pending_plan(state)
    return SourceIdentity(topic, pending.topic_id if pending is not None else None)


def check_binding(
    config: TableConfig, bound: SourceIdentity | None, broker: SourceIdentity, *, what: str = ""
) -> None:
    """Refuse to read (or publish) ``config``'s topic as the table's when the table is bound
    to another topic, or to an earlier incarnation of this one. ``what``: the batch or read
    this guards, named in the error."""
    if bound is None:
        return
    if bound.topic != config.source.topic:
        raise TopicChangedError(config.table, bound.describe(), broker.describe(), what)
    if bound.topic_id and broker.topic_id and bound.topic_id != broker.topic_id:
        raise TopicRecreatedError(config.table, bound.topic, bound.topic_id, broker.topic_id, what)


def still_bound(config: TableConfig, plan: Plan, client_conf: dict[str, Any], *, what: str) -> None:
    """Before what a batch read becomes visible: the topic is still the incarnation the plan
    read (a topic created again while it read fails it by name; nothing is published)."""
    if plan.topic_id and not plan.replay:
        check_binding(config, of_plan(plan), broker_identity(client_conf, config.source.topic), what=what)


def check_adopted(config: TableConfig, plan: Plan, client_conf: dict[str, Any]) -> None:
    """A planned, uncommitted batch is read again only if its offsets still hold its records:
    the table's topic, the same incarnation of it (topic id), and every planned offset still
    on the broker. Else a named error, before anything is read: ``TopicChangedError`` /
    ``TopicRecreatedError`` (way out: ``rebase``), ``OffsetsLostToRetentionError`` naming the
    batch (``accept-loss``; ``on_data_loss: record_and_continue`` decides it by itself) or
    ``OffsetsWentBackError`` (the topic was truncated)."""
    if plan.replay or config.source.retired:
        return
    check_binding(
        config,
        of_plan(plan),
        broker_identity(client_conf, config.source.topic),
        what=f"the planned {plan.describe()}",
    )
    broker = partition_offsets(client_conf, config.source.topic)
    for r in plan.ranges:
        if not r.size:
            continue
        if r.mq_partition not in broker:
            raise OffsetsWentBackError(config.table, plan.topic, r.mq_partition, r.end, None)
        earliest, latest = broker[r.mq_partition]
        if r.start < earliest:
            raise OffsetsLostToRetentionError(
                config.table, plan.topic, r.mq_partition, r.start, earliest, pending_batch=plan.batch_id
            )
        if latest < r.end:
            raise OffsetsWentBackError(config.table, plan.topic, r.mq_partition, r.end, latest)


@contextmanager
def named_read_failure(config: TableConfig, plan: Plan, client_conf: dict[str, Any]) -> Iterator[None]:
    """A read that failed because its planned offsets went meanwhile (retention, a
    DeleteRecords, the topic created again or truncated) fails by name, with the way out,
    not as a Spark task's error; any other failure stands as it is."""
    try:
        yield
    except Exception as exc:
        try:
            check_adopted(config, plan, client_conf)  # a replay's or a retired table's: passes
        except (DataLossError, OffsetsWentBackError, TopicRecreatedError, TopicChangedError) as named:
            raise named from exc
        except TidemarkError:  # the broker cannot say now: the read's own failure stands
            pass
        raise
