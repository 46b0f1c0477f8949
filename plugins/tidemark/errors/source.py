"""The broker's side of a table: unreachable or refusing brokers, and offsets that are gone, went
back or belong to another topic. Each names the table, topic, MQ partition and offsets, and the
one way out."""

from __future__ import annotations

from tidemark.errors.base import TidemarkError


class BrokerUnavailableError(TidemarkError):
    """The Kafka-protocol broker did not answer; names the bootstrap servers and topic."""


class BrokerRefusedError(BrokerUnavailableError):
    """The broker answers but refuses this client: a wrong password or unknown user, a
    mechanism it does not enable, a certificate it does not trust (or one the client does not
    trust), a protocol its listener does not speak. Names the bootstrap, the protocol and the
    mechanism, with the broker's reason; never the secret. Retrying does not help: fix
    ``source.kafka_properties`` (or the secret its ``${VAR}`` reads)."""

    def __init__(self, bootstrap: str, protocol: str, mechanism: str, reason: str, topic: str = "") -> None:
        self.bootstrap = bootstrap
        self.protocol = protocol
        self.mechanism = mechanism
        self.reason = reason
        on = f" (topic {topic})" if topic else ""
        auth = f", mechanism {mechanism}" if mechanism else ""
        super().__init__(
            f"the broker at {bootstrap}{on} refused the client (security.protocol {protocol}{auth}): {reason}; "
            "check source.kafka_properties and the secrets its ${VAR}s read"
        )


class DataLossError(TidemarkError):
    """Offsets the commit log expects to read are gone from the broker (retention)."""

    retryable = False

    def __init__(
        self,
        topic: str,
        partition: int,
        missing_from: int,
        missing_to: int,
        *,
        when: str = "before they were committed",
        hint: str = "set source.on_data_loss: record_and_continue to skip them (the gap is recorded "
        "in the commit record)",
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.missing_from = missing_from
        self.missing_to = missing_to
        super().__init__(
            f"data loss on {topic}[{partition}]: offsets {missing_from}..{missing_to - 1} "
            f"({missing_to - missing_from} records) are no longer on the broker (retention) {when}; "
            f"{hint}"
        )


class EarlierTopicError(DataLossError):
    """The offsets an hour needs were read from another topic, or from an earlier incarnation
    of the table's topic (deleted and created again, then rebased): the broker's offsets of the
    same numbers are other records now. A rebuild is refused, never re-read from the new
    topic: the published hour stays as it is."""

    def __init__(
        self, topic: str, partition: int, start: int, end: int, *, table: str, hour: str, why: str
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.missing_from = start
        self.missing_to = end
        self.table = table
        TidemarkError.__init__(
            self,
            f"data loss on {topic}[{partition}]: offsets {start}..{end - 1} that hour {hour} of {table} needs "
            f"{why}; the broker's offsets of those numbers are other records now. The published hour was left "
            "untouched; it can only be rebuilt from the topic that held them",
        )


class OffsetsLostToRetentionError(DataLossError):
    """The table's next offsets were deleted by the broker's retention (or a DeleteRecords)
    before any batch read them: never skipped silently. One way out, audited:
    ``tidemark resolve --table T --action accept-loss --reason ...`` (or, for a table that may
    always lose what retention takes, ``source.on_data_loss: record_and_continue``)."""

    def __init__(
        self,
        table: str,
        topic: str,
        partition: int,
        first_missing: int,
        first_available: int,
        *,
        pending_batch: int | None = None,
    ) -> None:
        self.table = table
        self.first_missing = first_missing
        self.first_available = first_available
        self.pending_batch = pending_batch  # the planned, uncommitted batch whose offsets went
        inside = f" inside the planned batch {pending_batch}" if pending_batch is not None else ""
        super().__init__(
            topic,
            partition,
            first_missing,
            first_available,
            when=f"before table {table} read them{inside} (first missing {first_missing}, first available "
            f"{first_available})",
            hint=f"accept the loss with tidemark resolve --table {table} --action accept-loss --reason '...' "
            "(only the deleted offsets are recorded as lost, in the audit log and in tidemark status; "
            "a planned batch is closed and planned again from the first available offset), or set "
            "source.on_data_loss: record_and_continue",
        )


class TopicRecreatedError(TidemarkError):
    """The table's topic was deleted and created again under the same name (another topic id):
    its offsets restart, so planning on from the committed ends would skip the new topic's
    first records or read other records under old offsets, and a pending batch's offsets now
    name other records. Nothing is read or published until an operator decides:
    ``tidemark resolve --table T --action rebase`` closes a pending batch of the old topic (its
    unread offsets recorded as a gap) and restarts every MQ partition at the new topic's
    earliest offset (audited)."""

    retryable = False

    def __init__(self, table: str, topic: str, committed_id: str, broker_id: str, what: str = "") -> None:
        self.table = table
        self.topic = topic
        self.committed_id = committed_id
        self.broker_id = broker_id
        guarded = f" ({what})" if what else ""
        super().__init__(
            f"{table}: topic {topic} was created again (topic id {committed_id} in the commit log, {broker_id} "
            f"on the broker): its offsets start over; nothing was read or published{guarded}. Decide with "
            f"tidemark resolve --table {table} --action rebase --reason '...' (a pending batch of the old "
            "topic is closed with its unread offsets recorded as a gap; every MQ partition restarts at the "
            "new topic's earliest offset)"
        )


class TopicChangedError(TidemarkError):
    """The table's config names another topic than the one its commit log is bound to (an
    edited ``source.topic``, or another family claiming the table's name): reading on would
    apply one topic's offsets to another. Put the topic back, or bind the table to the new
    topic: ``tidemark resolve --table T --action rebase`` (audited; every MQ partition starts at
    the new topic's earliest offset)."""

    retryable = False

    def __init__(self, table: str, bound: str, configured: str, what: str = "") -> None:
        self.table = table
        self.bound = bound
        self.configured = configured
        guarded = f" ({what})" if what else ""
        super().__init__(
            f"{table}: the table is bound to topic {bound} (its commit log), but its config now reads "
            f"topic {configured}; nothing was read or published{guarded}. Put source.topic back, or bind "
            f"the table to the new topic with tidemark resolve --table {table} --action rebase --reason "
            "'...' (every MQ partition starts at the new topic's earliest offset)"
        )


class StartingOffsetsError(TidemarkError):
    """``source.starting_offsets`` names an offset beyond the broker's latest: committing it
    would put the table's end past the high watermark, and every later plan would read that
    as a recreated topic."""

    retryable = False

    def __init__(self, table: str, topic: str, partition: int, start: int, latest: int) -> None:
        self.table = table
        super().__init__(
            f"{table}: source.starting_offsets gives {topic}[{partition}] offset {start}, beyond the broker's "
            f"latest offset {latest}; nothing was planned. Set it at most {latest} (or 'latest' to start at the "
            "end) in the table's YAML"
        )


class OffsetsWentBackError(TidemarkError):
    """The broker holds fewer offsets than the commit log already read (the topic was recreated
    or truncated, or a partition vanished): planning on would skip or re-read data silently."""

    retryable = False

    def __init__(
        self, table: str, topic: str, partition: int, committed_end: int, latest: int | None
    ) -> None:
        self.table = table
        self.topic = topic
        self.partition = partition
        self.committed_end = committed_end
        self.latest = latest
        now = "is gone from the broker" if latest is None else f"ends at offset {latest} on the broker"
        super().__init__(
            f"{table}: {topic}[{partition}] was read up to offset {committed_end} (commit log) but {now}; "
            "the topic was recreated or truncated. Nothing was planned. Check the topic; to go on from "
            f"the broker's offsets, record the decision: tidemark resolve --table {table} --action rebase "
            '--reason "..."'
        )
