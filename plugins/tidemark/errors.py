"""Named exceptions. Each carries the context a data engineer needs to act: the table, the
file or key, the partition and offsets involved. Messages never include secrets."""

from __future__ import annotations

import re


class TidemarkError(Exception):
    """Base of every error tidemark raises on purpose."""


class ConfigError(TidemarkError):
    """A table YAML or an environment setting is invalid.

    ``problems`` lists one ``"key: what was expected"`` line per problem, so a user fixes every
    mistake in one round instead of one per run.
    """

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: invalid configuration:\n{lines}")


class TableFilesError(ConfigError):
    """Table files that cannot run (invalid YAML, a refused schema change, a name collision):
    their tables have no DAGs, every other table's DAGs stay. ``problems`` maps each file to
    its problem."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        super().__init__(
            f"{len(files)} table file(s) cannot run; their tables have no DAGs until fixed "
            "(tidemark tables validate), every other table's DAGs are loaded",
            [f"{path}: {problem}" for path, problem in sorted(files.items())],
        )


class ServiceError(TidemarkError):
    """A local service (broker, Airflow) failed to start, answer or stop."""


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


class OffsetsLostToRetentionError(DataLossError):
    """The table's next offsets were deleted by the broker's retention (or a DeleteRecords)
    before any batch read them: never skipped silently. One way out, audited:
    ``tidemark resolve --table T --action accept-loss --reason ...`` (or, for a table that may
    always lose what retention takes, ``source.on_data_loss: record_and_continue``)."""

    def __init__(
        self, table: str, topic: str, partition: int, first_missing: int, first_available: int
    ) -> None:
        self.table = table
        self.first_missing = first_missing
        self.first_available = first_available
        super().__init__(
            topic,
            partition,
            first_missing,
            first_available,
            when=f"before table {table} read them (first missing {first_missing}, first available "
            f"{first_available})",
            hint=f"accept the loss with tidemark resolve --table {table} --action accept-loss --reason '...' "
            "(recorded in the audit log and counted in tidemark status), or set source.on_data_loss: "
            "record_and_continue",
        )


class TopicRecreatedError(TidemarkError):
    """The table's topic was deleted and created again under the same name (another topic id):
    its offsets restart, so planning on from the committed ends would skip the new topic's
    first records or read other records under old offsets. Nothing is planned until an
    operator decides: ``tidemark resolve --table T --action rebase`` restarts every MQ
    partition at the new topic's earliest offset (audited)."""

    def __init__(self, table: str, topic: str, committed_id: str, broker_id: str) -> None:
        self.table = table
        self.topic = topic
        super().__init__(
            f"{table}: topic {topic} was created again (topic id {committed_id} in the commit log, {broker_id} "
            f"on the broker): its offsets start over; nothing was planned. Decide with tidemark resolve "
            f"--table {table} --action rebase --reason '...' (every MQ partition restarts at the new topic's "
            "earliest offset)"
        )


class OffsetsWentBackError(TidemarkError):
    """The broker holds fewer offsets than the commit log already read (the topic was recreated
    or truncated, or a partition vanished): planning on would skip or re-read data silently."""

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


class BatchConflictError(TidemarkError):
    """Another process holds the table's batch lock or won the race to a create-only record."""


class ReconciliationError(TidemarkError):
    """Records read != rows written + dirty (+ late) for some MQ partition; nothing committed."""


class DirtyRatioExceededError(TidemarkError):
    """A batch has more dirty records than the table's max_dirty_ratio allows."""


class InjectedFault(TidemarkError):
    """Raised (or exited with) at a TIDEMARK_FAIL_AT crash point in tests."""


class QualityGateError(TidemarkError):
    """Hours failed expectations under the ``block`` policy: quarantined, not registered.

    ``failures`` maps each hour key to its failed expectations (the validation result)."""

    def __init__(self, table: str, failures: dict[str, list[str]]) -> None:
        self.table, self.failures = table, failures
        hours = "; ".join(f"{hour}: {' | '.join(lines)}" for hour, lines in sorted(failures.items()))
        first = min(failures)
        super().__init__(
            f"{table}: {len(failures)} hour(s) quarantined by the quality gate, not registered nor "
            f"announced ({hours}). Later hours were sealed. After checking the data, release with: "
            f"tidemark release --table {table} --hour {first}"
        )


class ReleaseError(TidemarkError):
    """``tidemark release`` was asked for an hour that is not quarantined."""


class RebuildError(TidemarkError):
    """An hour cannot be rebuilt (not sealed yet, quarantined, or its rows do not reconcile)."""


class SealDeadlineMissedError(TidemarkError):
    """Hours whose end + commit delay + grace has passed are still not sealed.

    ``overdue`` maps each hour key to why it waits (which MQ partition holds the watermark);
    ``ranges`` says the same grouped: consecutive hours held by the same thing, one line each."""

    def __init__(self, table: str, overdue: dict[str, str], ranges: list[str] | None = None) -> None:
        self.table, self.overdue = table, overdue
        lines = ranges or [f"{hour}: {why}" for hour, why in sorted(overdue.items())]
        super().__init__(
            f"{table}: {len(overdue)} hour(s) missed their seal deadline, in {len(lines)} range(s):\n  "
            + "\n  ".join(lines)
        )


class MetastoreServiceError(TidemarkError):
    """The metastore service refused or failed a registration (the table and partitions named)."""


class BootstrapError(TidemarkError):
    """A bootstrap source cannot be read or does not fit the table (columns, types, label)."""


class MergeError(TidemarkError):
    """A snapshot cannot be merged: no earlier snapshot to start from, or a bad label."""


class UnsealedHoursError(MergeError):
    """Increment hours a merge needs are not sealed yet (or are quarantined)."""

    def __init__(self, table: str, snapshot: str, hours: dict[str, str]) -> None:
        self.table, self.snapshot, self.hours = table, snapshot, hours
        shown = "; ".join(f"{hour}: {why}" for hour, why in sorted(hours.items())[:12])
        more = f" (+{len(hours) - 12} more)" if len(hours) > 12 else ""
        super().__init__(
            f"{table}: snapshot {snapshot} needs {len(hours)} increment hour(s) that are not sealed: "
            f"{shown}{more}. The merge runs once they are; see tidemark status --table {table}"
        )


class StorageError(TidemarkError):
    """A state location that cannot be served with create-only semantics."""


class ConditionalWriteUnsupportedError(StorageError):
    """An object store that does not honour a conditional PUT (``If-None-Match: *``): two
    writers could both commit one version, so tidemark refuses to commit there."""

    def __init__(self, table: str, uri: str, seen: str) -> None:
        self.table, self.uri = table, uri
        super().__init__(
            f"{table}: the object store of {uri} does not refuse a second PUT of an existing "
            f"key under If-None-Match: * ({seen}); tidemark's commit records and Delta commits "
            "there would not be safe from a concurrent or paused writer. Use a store with "
            "conditional writes (AWS S3, SeaweedFS, MinIO, R2)"
        )


class LeaseLostError(TidemarkError):
    """This job's lock lease expired and another job took the lock over (the job was paused
    past its lease): it stops before making anything visible."""


class SchemaEvolutionError(TidemarkError):
    """A table's YAML schema changed in a way old hours cannot be read under: a drop, a rename,
    a narrowing, a new non-nullable column, or a change of the partitioning or the event-time
    field. ``problems`` names each column and the rule it breaks."""

    def __init__(self, table: str, problems: list[str], recorded_version: int) -> None:
        self.table = table
        self.problems = problems
        self.recorded_version = recorded_version
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"{table}: the schema in the table YAML is not a compatible change of schema version "
            f"{recorded_version} (tidemark schema --table {table} shows the history); nothing ran:\n{lines}"
        )


class WriterModeError(TidemarkError):
    """A writer (the batch dump or the stream) ran while the table is switched to the other one
    (``tidemark switch``): it read nothing and changed nothing."""

    def __init__(self, table: str, mode: str, writer: str) -> None:
        self.table = table
        self.mode = mode
        self.writer = writer
        super().__init__(
            f"{table}: the table is written by the {mode} (tidemark status shows since when and who "
            f"switched it); this {writer} run read nothing and changed nothing. To hand the table to "
            f'the {writer}: tidemark switch --table {table} --to {writer} --reason "..."'
        )


class StaleConfigError(SchemaEvolutionError):
    """This process runs an older table YAML than one a job already wrote with (a rolling
    deploy: a worker with the old YAML, or a long-running stream started before a change).
    Sealing or dumping with it would drop the newer columns of the hour's batches for good, so
    the job refuses before it reads or writes anything."""

    def __init__(
        self, table: str, config_version: int, recorded_version: int, recorded_by: str, problems: list[str]
    ) -> None:
        self.config_version = config_version
        lines = "".join(f"\n  - {p}" for p in problems)
        TidemarkError.__init__(
            self,
            f"{table}: this process's table YAML is schema version {config_version}, but version "
            f"{recorded_version} was recorded since (run {recorded_by}): it runs an older "
            f"conf/tables/{table}.yaml than other workers (a rolling deploy, or a stream started "
            "before the change); nothing was read or written. Deploy the newest YAML to this "
            "worker (and restart a stream), then retry; the schema never goes back "
            f"(tidemark schema --table {table} shows the history):{lines}",
        )
        self.table = table
        self.problems = problems
        self.recorded_version = recorded_version


class VersionConflictError(TidemarkError):
    """A version directory of a partition is being written by another live step (a rebuild and
    an amend naming the same next version): this step wrote nothing there; retry it."""


class HourCommitConflictError(TidemarkError):
    """An Iceberg table already holds a newer (or another) version of the hour than the one a
    step was about to commit: the step is a zombie or raced a newer one, and committed nothing.
    The table and hour are named; ``tidemark status --table`` shows the journal's version."""


class IcebergRuntimeMissingError(TidemarkError):
    """A job writing an Iceberg table runs without Iceberg's runtime on its driver's class
    path (or without a Spark session): nothing was committed. The way out: run it as
    tidemark launches it (``SparkJob.launch_conf`` gives spark-submit the jars; ``make jvm``
    fetches them), then retry the task."""


class SchemaRegistryUnavailableError(TidemarkError):
    """The Schema Registry of a table did not answer (or refused the client): no record was
    judged by it. The batch fails before its commit, and its retry reads the same offsets."""

    def __init__(self, table: str, url: str, detail: str) -> None:
        self.table = table
        self.url = url
        super().__init__(
            f"{table}: the Schema Registry at {url} cannot be reached ({detail}); nothing was "
            "committed, and a retry of this run re-reads the same batch. Check the registry "
            "(curl <url>/subjects) and source.schema_registry in the table YAML"
        )

    @classmethod
    def relayed(cls, table: str, message: str) -> SchemaRegistryUnavailableError:
        """The error again from its message (as a Spark task's failure carries it to the driver)."""
        found = re.search(r"the Schema Registry at (\S+) cannot be reached", message)
        error = cls(table, found.group(1) if found else "", "")
        error.args = (message,)
        return error


class ResolveError(TidemarkError):
    """A decision that does not apply to the table's state (nothing pending, no reason given)."""


class GroupTableFailedError(TidemarkError):
    """One table of a group job failed (its own error is ``detail``); the group's other
    tables went on. Retrying or clearing the table's task runs that table alone, same run id."""

    def __init__(self, group: str, table: str, job: str, run_id: str, detail: str) -> None:
        self.group, self.table, self.job, self.run_id, self.detail = group, table, job, run_id, detail
        super().__init__(
            f"{table} (group {group}): the {job} of run {run_id} failed: {detail} -- the group's other "
            f"tables are not affected; retrying or clearing this table's task runs {table} alone"
        )


class MembershipError(TidemarkError):
    """A change of a family's or a group's members that cannot be made (an active topic
    forgotten, a table that is not a member asked to leave): names the family or group, the
    table and what to do instead."""
