"""What writes a version of a Delta snapshot (``cdc.merge_engine``): one interface, two engines.

``DeltaSnapshot`` (``tidemark.snapshot.delta``) owns the model: which version holds which
label, recovery, VACUUM and the reads, all through delta-rs. An engine only writes: the
bootstrap's state (``overwrite``) and a MERGE (``merge``), each as exactly one Delta commit
that carries the snapshot record and the app transaction ``DeltaSnapshot`` checks.

- ``DeltaRsEngine``: delta-rs in the driver (the MERGE's source collected as Arrow). The
  default: on one machine it is 12-20x faster than Spark's MERGE (docs/benchmarks.md).
- ``SparkDeltaEngine``: delta-spark on the session's executors (the session built with
  ``tidemark.delta_spark``), for a snapshot whose rewrite is beyond one machine. The record
  goes in the commit's ``userMetadata`` and the app transaction through Delta's idempotent
  writes (``spark.databricks.delta.write.txnAppId``/``txnVersion``), both of which delta-rs
  reads. A commit that did not land where expected (skipped as already written, or another
  writer's) is an error, never recorded. On S3 its commit files are conditional PUTs through
  tidemark's log store (``tidemark.delta_spark``); a session without it is refused there.

Metrics come back in delta-rs' names (``num_target_rows_inserted``, ...), whoever wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tidemark.delta_spark import S3_LOG_STORE, S3_LOG_STORE_CONF
from tidemark.errors import MergeError
from tidemark.seal.metastore import quote_identifier
from tidemark.snapshot.spark_merge import SessionConf, run_merge, staged_frame
from tidemark.snapshot.versioned import DELETE_FLAG, RECORD_KEY
from tidemark.tablefs import delta_storage_options, filesystem, hadoop_create_is_exclusive, hadoop_uri

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

SPARK_COMMIT_CONF = (
    "spark.databricks.delta.write.txnAppId",
    "spark.databricks.delta.write.txnVersion",
    "spark.databricks.delta.commitInfo.userMetadata",
)


@dataclass(frozen=True)
class DeltaCommit:
    """One commit of the snapshot table: where, which version it must be, what it carries."""

    table: str  # the CDC table, for messages
    uri: str
    version: int  # the Delta version this commit creates
    app_id: str
    record: dict[str, Any]  # the snapshot record, JSON
    columns: tuple[tuple[str, str], ...]  # the snapshot's columns and their Spark SQL types
    key: tuple[str, ...]
    version_field: str
    file_size: int

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.columns]

    def carried_by(self, commit_info: dict[str, Any]) -> bool:
        """Whether a commit's info carries this commit's record."""
        found = record_of(commit_info)
        return found is not None and json.dumps(found, sort_keys=True) == json.dumps(
            self.record, sort_keys=True
        )


class DeltaWriteEngine(Protocol):
    name: str

    def overwrite(self, files: Sequence[str], schema: pa.Schema, commit: DeltaCommit) -> dict[str, Any]: ...

    def merge(
        self, source: DataFrame, schema: pa.Schema, commit: DeltaCommit, *, only_newer: bool
    ) -> dict[str, Any]:
        """``source``: the snapshot's columns and ``_tm_delete``, one row per key; ``schema``
        its Arrow schema. ``only_newer``: a row applies only when its version is at least the
        target's."""
        ...


def user_metadata(record: dict[str, Any]) -> str:
    """A commit's ``userMetadata`` (both engines): its label, readable in ``DESCRIBE HISTORY``,
    and the whole snapshot record."""
    return json.dumps({"label": record.get("label"), RECORD_KEY: json.dumps(record, sort_keys=True)})


def record_of(commit_info: dict[str, Any]) -> dict[str, Any] | None:
    """The snapshot record a commit carries (its ``userMetadata``; delta-rs commits of earlier
    releases: a commitInfo key of its own), or None."""
    raw = commit_info.get(RECORD_KEY)
    if raw is None and isinstance(commit_info.get("userMetadata"), str):
        try:
            carried = json.loads(commit_info["userMetadata"])
        except ValueError:  # someone else's commit message
            carried = None
        raw = carried.get(RECORD_KEY) if isinstance(carried, dict) else None
    return json.loads(raw) if isinstance(raw, str) else None


# delta-spark's names of a MERGE's operation metrics, in delta-rs' names
SPARK_METRICS = {
    "numSourceRows": "num_source_rows",
    "numTargetRowsInserted": "num_target_rows_inserted",
    "numTargetRowsUpdated": "num_target_rows_updated",
    "numTargetRowsDeleted": "num_target_rows_deleted",
    "numTargetFilesRemoved": "num_target_files_removed",
    "numTargetFilesAdded": "num_target_files_added",
}


def commit_metrics(commit_info: dict[str, Any]) -> dict[str, Any]:
    """A commit's operation metrics in delta-rs' names, whichever engine wrote it (recovery
    counts a recovered MERGE's rows from them)."""
    metrics = dict(commit_info.get("operationMetrics") or {})
    for spark_name, name in SPARK_METRICS.items():
        if spark_name in metrics:
            metrics[name] = int(metrics.pop(spark_name))
    return metrics


def sql_name(name: str) -> str:
    """A column in a delta-rs (DataFusion) predicate."""
    return name if name.isidentifier() and name.islower() else '"' + name.replace('"', '""') + '"'


class DeltaRsEngine:
    name = "delta-rs"

    def overwrite(self, files: Sequence[str], schema: pa.Schema, commit: DeltaCommit) -> dict[str, Any]:
        import pyarrow as pa
        from deltalake import write_deltalake

        reader = pa.RecordBatchReader.from_batches(schema, _batches(files, schema))
        write_deltalake(
            commit.uri,
            reader,
            mode="overwrite",
            schema_mode="overwrite",
            configuration={"delta.targetFileSize": str(commit.file_size)},
            target_file_size=commit.file_size,
            commit_properties=self._properties(commit),
            storage_options=delta_storage_options(commit.uri),
        )
        return {}

    def merge(
        self, source: DataFrame, schema: pa.Schema, commit: DeltaCommit, *, only_newer: bool
    ) -> dict[str, Any]:
        from deltalake import DeltaTable

        rows = source.toArrow()
        table = DeltaTable(commit.uri, storage_options=delta_storage_options(commit.uri))
        on = " AND ".join(f"t.{sql_name(k)} = s.{sql_name(k)}" for k in commit.key)
        version = sql_name(commit.version_field)
        newer = f"(t.{version} IS NULL OR s.{version} >= t.{version})" if only_newer else "true"
        values = {sql_name(n): f"s.{sql_name(n)}" for n in commit.names}
        return dict(
            table.merge(
                rows.cast(schema),
                on,
                source_alias="s",
                target_alias="t",
                commit_properties=self._properties(commit),
            )
            .when_matched_delete(f"s.{DELETE_FLAG} AND {newer}")
            .when_matched_update(values, f"NOT s.{DELETE_FLAG} AND {newer}")
            .when_not_matched_insert(values, f"NOT s.{DELETE_FLAG}")
            .execute()
        )

    @staticmethod
    def _properties(commit: DeltaCommit) -> Any:
        from deltalake import CommitProperties, Transaction

        return CommitProperties(
            custom_metadata={"userMetadata": user_metadata(commit.record)},
            app_transactions=[Transaction(commit.app_id, commit.version)],
            max_commit_retries=0,  # one writer under the snapshot lock: a conflict is an error
        )


class SparkDeltaEngine:
    name = "spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def overwrite(self, files: Sequence[str], schema: pa.Schema, commit: DeltaCommit) -> dict[str, Any]:
        self._refuse_object_store(commit)
        frame = staged_frame(self.spark, files, commit.columns, commit.file_size)
        with SessionConf(self.spark, self._commit_conf(commit)):
            frame.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
                hadoop_uri(commit.uri)
            )
        self._landed(commit)
        return {}

    def merge(
        self, source: DataFrame, schema: pa.Schema, commit: DeltaCommit, *, only_newer: bool
    ) -> dict[str, Any]:
        self._refuse_object_store(commit)
        run_merge(
            self.spark,
            source,
            f"delta.{quote_identifier(hadoop_uri(commit.uri))}",
            key=commit.key,
            names=commit.names,
            version_field=commit.version_field,
            only_newer=only_newer,
            commit_conf=self._commit_conf(commit),
        )
        return commit_metrics(self._landed(commit))

    @staticmethod
    def _commit_conf(commit: DeltaCommit) -> dict[str, str]:
        values = (commit.app_id, str(commit.version), user_metadata(commit.record))
        return dict(zip(SPARK_COMMIT_CONF, values, strict=True))

    @staticmethod
    def _landed(commit: DeltaCommit) -> dict[str, Any]:
        """The commit's info, once it is the version this commit was to create and carries
        its record; else a MergeError (Delta skipped it as already written, or another writer
        took the version)."""
        from deltalake import DeltaTable

        table = DeltaTable(commit.uri, storage_options=delta_storage_options(commit.uri))
        info = table.history(1)[0] if table.version() == commit.version else {}
        if not commit.carried_by(info):
            raise MergeError(
                f"{commit.table}: delta-spark's commit of Delta version {commit.version} of {commit.uri} "
                f"did not land (the table is at version {table.version()}): another writer, or a repeated "
                "app transaction; nothing is recorded, retry the task"
            )
        return dict(info)

    def _refuse_object_store(self, commit: DeltaCommit) -> None:
        """On S3 only with tidemark's conditional log store (``tidemark.delta_spark``): Delta's
        own S3 store does not stop a writer past its lease from replacing a version."""
        if hadoop_create_is_exclusive(commit.uri):
            return
        if self.spark.conf.get(S3_LOG_STORE_CONF, None) != S3_LOG_STORE:
            raise MergeError(
                f"{commit.table}: cdc.merge_engine: spark on {commit.uri} needs the session conf "
                f"{S3_LOG_STORE_CONF}={S3_LOG_STORE} (tidemark.delta_spark.delta_spark_conf; `make jvm` "
                "compiles it): Delta's own S3 log store does not fence a writer past its lease"
            )


def engine_for(name: str, spark: SparkSession) -> DeltaWriteEngine:
    return SparkDeltaEngine(spark) if name == "spark" else DeltaRsEngine()


def _batches(files: Sequence[str], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The staged files' rows in the Delta schema (Spark's timestamps may be INT96)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for uri in files:
        fs, path = filesystem(uri)
        with fs.open_input_file(path) as handle:
            for batch in pq.ParquetFile(handle, coerce_int96_timestamp_unit="us").iter_batches(
                batch_size=65_536, columns=schema.names
            ):
                yield from pa.Table.from_batches([batch]).select(schema.names).cast(schema).to_batches()
