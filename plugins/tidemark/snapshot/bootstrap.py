"""Bulk-load bootstrap: one full read of the source into a snapshot, aligned to the CDC stream.

Alignment is by offsets, not by clocks: *before* the source is read, the end offset of every
MQ partition of the table's CDC topic is recorded in the run's plan. Every change committed
after those offsets is in the increments; a change between the offsets and the read is in
both, which is harmless because merges keep the highest (version, offset) per key. A gap is
impossible. The first merge on top of a bootstrap skips increment rows below the offsets
(those changes are already in the source it read, or were undone there).

Idempotent per run id: the plan (offsets, as-of instant) is written once and reused by
retries; a run whose record exists is a no-op; a crash anywhere before the record leaves the
previous snapshot live and the retry starts the read again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import BootstrapError
from tidemark.faults import crash_point
from tidemark.ingest.kafka import client_properties, partition_offsets
from tidemark.masking import mask_text
from tidemark.seal.metastore import quote_identifier
from tidemark.settings import Settings
from tidemark.snapshot.delta import DeltaSnapshot, is_delta, snapshot_lock
from tidemark.snapshot.snapshots import SnapshotLog, SnapshotRecord, SnapshotStore, check_label
from tidemark.state.locks import TableLock
from tidemark.time.hours import hour_of
from tidemark.time.instants import as_utc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SOURCE_KINDS = ("jdbc", "parquet", "csv")
USER_ENV = "TIDEMARK_SOURCE_USER"
PASSWORD_ENV = "TIDEMARK_SOURCE_PASSWORD"


@dataclass(frozen=True)
class BootstrapSource:
    """What to read. Credentials never live here: they come from the environment (which the
    Airflow task fills from a connection), so they are neither in params nor in logs."""

    kind: str
    location: str  # JDBC URL, or a path of Parquet/CSV files
    table: str = ""  # jdbc: a table name ...
    query: str = ""  # ... or a SELECT
    partition_column: str = ""  # jdbc: numeric/date column for parallel range reads
    lower_bound: str = ""  # jdbc: empty = looked up with min()/max()
    upper_bound: str = ""
    num_partitions: int = 4
    fetch_size: int = 10_000

    def __post_init__(self) -> None:
        if self.kind not in SOURCE_KINDS:
            raise BootstrapError(f"source kind {self.kind!r}: expected one of {', '.join(SOURCE_KINDS)}")
        if not self.location:
            raise BootstrapError(f"{self.kind} source: a location (JDBC URL or path) is required")
        if self.kind == "jdbc" and bool(self.table) == bool(self.query):
            raise BootstrapError("jdbc source: give exactly one of a source table or a query")
        if self.num_partitions < 1:
            raise BootstrapError(f"num_partitions must be >= 1, got {self.num_partitions}")

    def describe(self) -> str:
        """For logs and the snapshot record: no password, even one written into the URL."""
        where = mask_text(self.location)
        what = self.table or (f"query {self.query[:80]!r}" if self.query else "")
        split = f", {self.num_partitions} ranges of {self.partition_column}" if self.partition_column else ""
        return f"{self.kind} {where}" + (f" {what}" if what else "") + split

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def relation(self) -> str:
        """The ``dbtable`` option: a table, or the query as a derived table (Spark's ``query``
        option cannot be combined with partitioned reads)."""
        return self.table or f"({self.query}) tidemark_source"


@dataclass(frozen=True)
class SourceArgument:
    """One field of :class:`BootstrapSource` as the job's flag and the trigger form's param:
    declared once, so the DAG, the spark-submit job and the source cannot drift apart."""

    field: str  # BootstrapSource field
    flag: str  # spark_jobs/bootstrap.py argument
    param: str  # trigger-form param
    title: str
    help: str
    default: str | int = ""
    choices: tuple[str, ...] = ()
    required: bool = False

    @property
    def integer(self) -> bool:
        return isinstance(self.default, int)


SOURCE_ARGUMENTS = (
    SourceArgument(
        "kind", "--source-kind", "source_kind", "Source kind", "What to read.", "jdbc", SOURCE_KINDS, True
    ),
    SourceArgument(
        "location",
        "--source",
        "source",
        "Source",
        "JDBC URL (jdbc:postgresql://host:5432/db) or a path of Parquet/CSV files.",
        required=True,
    ),
    SourceArgument("table", "--source-table", "source_table", "Source table", "jdbc: the table to read."),
    SourceArgument("query", "--query", "query", "Query", "jdbc: a SELECT, instead of a table."),
    SourceArgument(
        "partition_column",
        "--partition-column",
        "partition_column",
        "Partition column",
        "jdbc: numeric/date column to split reads by.",
    ),
    SourceArgument(
        "lower_bound", "--lower-bound", "lower_bound", "Lower bound", "jdbc: split start; empty = min()."
    ),
    SourceArgument(
        "upper_bound", "--upper-bound", "upper_bound", "Upper bound", "jdbc: split end; empty = max()."
    ),
    SourceArgument(
        "num_partitions",
        "--num-partitions",
        "num_partitions",
        "Parallel reads",
        "jdbc: ranges read in parallel (and files written).",
        4,
    ),
)


def add_source_arguments(parser: Any) -> None:
    """The source flags of ``spark_jobs/bootstrap.py`` (an argparse parser)."""
    for arg in SOURCE_ARGUMENTS:
        parser.add_argument(
            arg.flag,
            dest=f"source__{arg.field}",  # apart from the job's own --table
            type=int if arg.integer else str,
            default=arg.default,
            required=arg.required,
            choices=arg.choices or None,
            help=arg.help,
        )


def source_from_arguments(args: Any) -> BootstrapSource:
    """The source an argparse namespace of :func:`add_source_arguments` describes."""
    return BootstrapSource(**{arg.field: getattr(args, f"source__{arg.field}") for arg in SOURCE_ARGUMENTS})


def credentials(env: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    found = {"user": env.get(USER_ENV, ""), "password": env.get(PASSWORD_ENV, "")}
    return {k: v for k, v in found.items() if v}


def jdbc_options(source: BootstrapSource, secret: Mapping[str, str]) -> dict[str, str]:
    """Spark JDBC reader options (pure; bounds must be known when a partition column is set)."""
    options = {
        "url": source.location,
        "dbtable": source.relation,
        "fetchsize": str(source.fetch_size),
        **secret,
    }
    if source.partition_column:
        if not (source.lower_bound and source.upper_bound):
            raise BootstrapError(f"jdbc source: bounds of {source.partition_column} are not known")
        options.update(
            partitionColumn=source.partition_column,
            lowerBound=source.lower_bound,
            upperBound=source.upper_bound,
            numPartitions=str(source.num_partitions),
        )
    return options


def read_source(spark: SparkSession, source: BootstrapSource, secret: Mapping[str, str]) -> DataFrame:
    """The source as a DataFrame; JDBC reads are split into ranges of the partition column."""
    if source.kind == "parquet":
        return spark.read.parquet(source.location)
    if source.kind == "csv":
        return spark.read.option("header", "true").option("inferSchema", "false").csv(source.location)
    try:
        if source.partition_column and not (source.lower_bound and source.upper_bound):
            source = _bounded(spark, source, secret)
        return spark.read.format("jdbc").options(**jdbc_options(source, secret)).load()
    except BootstrapError:
        raise
    except Exception as exc:  # Py4J/Analysis errors: say what was read, never the password
        raise BootstrapError(f"cannot read {source.describe()}: {_first_line(exc)}") from None


def _bounded(spark: SparkSession, source: BootstrapSource, secret: Mapping[str, str]) -> BootstrapSource:
    """The source with the partition column's min/max as bounds (one small query)."""
    column = quote_sql_identifier(source.partition_column)
    query = f"(SELECT min({column}) lo, max({column}) hi FROM {source.relation}) tidemark_bounds"
    options = {**jdbc_options(_without_split(source), secret), "dbtable": query}
    lo, hi = spark.read.format("jdbc").options(**options).load().collect()[0]
    log.info("bootstrap: %s ranges over %s in [%s, %s]", source.num_partitions, column, lo, hi)
    # An empty source has no bounds and nothing to split.
    return _without_split(source) if lo is None else _with_bounds(source, str(lo), str(hi))


def quote_sql_identifier(name: str) -> str:
    """ANSI double quotes for the source database (PostgreSQL, MySQL in ANSI mode)."""
    return '"' + name.replace('"', '""') + '"'


def _without_split(source: BootstrapSource) -> BootstrapSource:
    return replace(source, partition_column="", lower_bound="", upper_bound="")


def _with_bounds(source: BootstrapSource, lo: str, hi: str) -> BootstrapSource:
    return replace(source, lower_bound=lo, upper_bound=hi)


def _first_line(exc: BaseException) -> str:
    """The cause in one line: the Java exception for Py4J errors (their own first line only
    says "An error occurred while calling o70.load"); passwords in URLs masked."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    text = mask_text(text)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def conform(frame: DataFrame, config: TableConfig, columns: list[tuple[str, str]]) -> DataFrame:
    """The source's columns cast to the snapshot's types (matched case-insensitively); a missing
    column fails naming every one, extra columns are dropped with a log line."""
    from pyspark.sql import functions as F

    by_lower = {c.lower(): c for c in frame.columns}
    missing = [name for name, _ in columns if name.lower() not in by_lower]
    if missing:
        raise BootstrapError(
            f"{config.table}: the source lacks column(s) {', '.join(missing)} of {config.snapshot_table} "
            f"(source columns: {', '.join(frame.columns)})"
        )
    wanted = {name.lower() for name, _ in columns}
    extra = [c for c in frame.columns if c.lower() not in wanted]
    if extra:
        log.info("%s: ignoring source column(s) not in the table: %s", config.table, ", ".join(extra))
    return frame.select(
        *(F.col(quote_identifier(by_lower[name.lower()])).cast(ddl).alias(name) for name, ddl in columns)
    )


@dataclass(frozen=True)
class BootstrapResult:
    table: str
    run_id: str
    label: str
    version: int
    rows: int
    aligned_offsets: dict[str, int]
    increments_from: str
    source: str
    already_done: bool = False
    atomic_swap: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def align(config: TableConfig, settings: Settings) -> dict[str, int]:
    """The end offset of every MQ partition of the CDC topic, now (before the source read)."""
    conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
    ends = {str(p): high for p, (_, high) in partition_offsets(conf, config.source.topic).items()}
    log.info("%s: increments start at offsets %s of topic %s", config.table, ends, config.source.topic)
    return ends


def preview_bootstrap(
    config: TableConfig, settings: Settings, source: BootstrapSource, *, as_of: datetime, label: str = ""
) -> dict[str, Any]:
    """What a bootstrap would do (dry run): the label, the source and today's end offsets."""
    return {
        "table": config.table,
        "dry_run": True,
        "label": check_label(config, label or default_label(as_of)),
        "source": source.describe(),
        "end_offsets_now": align(config, settings),
    }


def default_label(as_of: datetime) -> str:
    return as_of.strftime("%Y-%m-%dT%H%M")


def run_bootstrap(
    spark: SparkSession,
    config: TableConfig,
    settings: Settings,
    run_id: str,
    source: BootstrapSource,
    *,
    as_of: datetime,
    label: str = "",
) -> BootstrapResult:
    """Read ``source`` into snapshot ``label`` aligned to the CDC topic; see the module doc."""
    if config.cdc is None:
        raise BootstrapError(f"{config.table}: not a cdc table (no cdc: section), nothing to bootstrap")
    snapshots = SnapshotLog(settings.state_location, config.table)
    label = check_label(config, label or default_label(as_of))
    delta = DeltaSnapshot(spark, config, settings) if is_delta(config) else None
    for record in snapshots.records():
        if record.run_id == run_id and record.kind == "bootstrap":
            log.info("%s: run %s already bootstrapped %s; nothing to do", config.table, run_id, record.ref)
            if delta is not None:  # its job may have died before the views
                with TableLock(settings.state_location, config.table, snapshot_lock(config, label)).hold(
                    run_id
                ):
                    delta.after_commit(snapshots)
            return _result(record, already_done=True)
    store = SnapshotStore(spark, config, settings)
    with TableLock(settings.state_location, config.table, snapshot_lock(config, label)).hold(run_id) as lease:
        if delta is not None:
            for record in delta.recover(snapshots):
                if record.run_id == run_id:
                    store.drop_staging(label, run_id)
                    delta.after_commit(snapshots)
                    return _result(record)
        margin = config.watermark.max_out_of_orderness
        plan = snapshots.save_plan(
            run_id,
            {
                "run_id": run_id,
                "label": label,
                "as_of": as_of.isoformat(),
                # Changes after the offsets carry event times from about as_of on; the margin
                # covers their disorder, so the first merge reads every hour they can be in.
                "increments_from": hour_of(as_of - margin, config.event_time.time_zone).start.isoformat(),
                "aligned_offsets": align(config, settings),
                "source": source.describe(),
            },
        )
        if plan["label"] != label:
            raise BootstrapError(
                f"{config.table}: run {run_id} was planned for snapshot {plan['label']}, not {label}"
            )
        crash_point("after_alignment")
        log.info("%s: bootstrap %s of %s from %s", config.table, run_id, label, plan["source"])
        frame = conform(read_source(spark, source, credentials()), config, store.columns())
        if delta is not None:  # key-ranged files: a MERGE of recent keys rewrites few of them
            frame = frame.orderBy(*(quote_identifier(k) for k in config.primary_key))
        staged = store.stage(
            frame, label, run_id, f"bootstrap {plan['as_of']} {plan['aligned_offsets']}", lease
        )
        crash_point("after_snapshot_staging")
        pending = SnapshotRecord(
            seq=-1,
            table=config.table,
            label=label,
            kind="bootstrap",
            version=0,  # the log assigns the label's next version
            run_id=run_id,
            through=plan["as_of"],
            increments_from=plan["increments_from"],
            rows=staged.rows,
            files=staged.files,
            created_at=datetime.now().astimezone().isoformat(),
            source=plan["source"],
            aligned_offsets=plan["aligned_offsets"],
            location=staged.location,
        )
        lease.check()  # paused past the label's lease: another bootstrap owns it now
        if delta is not None:  # the Delta commit is the swap; the record follows it
            committed = delta.overwrite(store.staged_uris(staged), replace(pending, location=""))
            crash_point("after_snapshot_swap")
            record = snapshots.append(committed)
            store.drop_staging(label, run_id)
            lease.check()
            delta.after_commit(snapshots)
            atomic = True
        else:
            atomic = store.publish(staged)
            record = snapshots.append(pending)
            store.discard(staged, record)
    return replace(_result(record), atomic_swap=atomic)


def _result(record: SnapshotRecord, *, already_done: bool = False) -> BootstrapResult:
    return BootstrapResult(
        table=record.table,
        run_id=record.run_id,
        label=record.label,
        version=record.version,
        rows=record.rows,
        aligned_offsets=record.aligned_offsets,
        increments_from=record.increments_from,
        source=record.source,
        already_done=already_done,
    )


def parse_as_of(text: str) -> datetime:
    """An ISO instant (Airflow's ``run_after``); naive means UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise BootstrapError(f"--as-of {text!r}: expected an ISO 8601 instant") from None
    return as_utc(value)
