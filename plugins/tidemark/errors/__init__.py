"""Named exceptions. Each carries the context a data engineer needs to act: the table, the
file or key, the partition and offsets involved. Messages never include secrets."""

from __future__ import annotations

import re

from tidemark.errors.base import TidemarkError as TidemarkError
from tidemark.errors.source import (
    BrokerRefusedError as BrokerRefusedError,
)
from tidemark.errors.source import (
    BrokerUnavailableError as BrokerUnavailableError,
)
from tidemark.errors.source import (
    DataLossError as DataLossError,
)
from tidemark.errors.source import (
    EarlierTopicError as EarlierTopicError,
)
from tidemark.errors.source import (
    OffsetsLostToRetentionError as OffsetsLostToRetentionError,
)
from tidemark.errors.source import (
    OffsetsWentBackError as OffsetsWentBackError,
)
from tidemark.errors.source import (
    StartingOffsetsError as StartingOffsetsError,
)
from tidemark.errors.source import (
    TopicChangedError as TopicChangedError,
)
from tidemark.errors.source import (
    TopicRecreatedError as TopicRecreatedError,
)


class ConfigError(TidemarkError):
    """A table YAML or an environment setting is invalid.

    ``problems`` lists one ``"key: what was expected"`` line per problem, so a user fixes every
    mistake in one round instead of one per run.
    """

    retryable = False

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


class BatchConflictError(TidemarkError):
    """Another process holds the table's batch lock or won the race to a create-only record."""


class ReconciliationError(TidemarkError):
    """Records read != rows written + dirty (+ late) for some MQ partition; nothing committed."""


class DirtyRatioExceededError(TidemarkError):
    """A batch has more dirty records than the table's max_dirty_ratio allows."""

    retryable = False


class InjectedFault(TidemarkError):
    """Raised (or exited with) at a TIDEMARK_FAIL_AT crash point in tests."""


class QualityGateError(TidemarkError):
    """Hours failed expectations under the ``block`` policy: quarantined, not registered.

    ``failures`` maps each hour key to its failed expectations (the validation result)."""

    retryable = False

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

    # retryable: a rebuild that lost a race to another step is retried and goes on


class HourRangeError(RebuildError):
    """A rebuild's hour range that cannot be (the last hour before the first, too many hours,
    a manual run without its first hour): the trigger form's params, wrong on every try."""

    retryable = False


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

    retryable = False

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

    retryable = True  # the newest YAML deployed to this worker ends it

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


class IcebergCatalogError(TidemarkError):
    """The Iceberg catalog refused tidemark or did not answer: the catalog (secrets masked) and
    the operation are named; the call that failed committed nothing it can confirm."""


class IcebergCatalogAuthError(IcebergCatalogError):
    """The REST catalog refused tidemark's credential or token (401/403, an OAuth2 error): the
    way out is a credential it accepts (``TIDEMARK_ICEBERG_CATALOG_CREDENTIAL`` or
    ``TIDEMARK_ICEBERG_CATALOG_TOKEN``), then a retry of the task."""


class IcebergCatalogUnavailableError(IcebergCatalogError):
    """The REST catalog did not answer within ``TIDEMARK_ICEBERG_CATALOG_TIMEOUT_S`` (or not at
    all): a retry of the task once it answers checks whether an unanswered commit landed."""


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

    retryable = False


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

    retryable = False


class LakeCheckError(TidemarkError):
    """``tidemark verify`` found the table as readers see it disagreeing with its commit log
    (the message lists every violation, check by check). Nothing was changed: each problem
    names the hour, batch, offsets or file to look at; ``tidemark rebuild`` re-creates an hour
    from the broker, and a stray file is the collector's (or an operator's) to remove."""

    retryable = False
