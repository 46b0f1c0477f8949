"""Where a bootstrap reads its full snapshot: a JDBC table (split into ranges), Parquet or
CSV files; the job's arguments for it, the credentials from the environment (never in the
arguments), and the read itself."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from tidemark.errors import BootstrapError
from tidemark.masking import exception_line, mask_text

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
        raise BootstrapError(f"cannot read {source.describe()}: {exception_line(exc)}") from None


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
