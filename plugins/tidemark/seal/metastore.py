"""Hive metastore DDL for tidemark tables: statement builders (pure) and their executor.

Every identifier is back-quoted and every value single-quoted with escapes; partition values
from data were already restricted to ``[A-Za-z0-9_.-]`` by the dump, so quoting is a second
line of defence, not the only one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

from tidemark.config import TableConfig
from tidemark.config.columns import data_fields, partition_columns
from tidemark.evolution import is_widening
from tidemark.faults import crash_point
from tidemark.lazy_session import spark_started
from tidemark.metastore_service import DATABASE
from tidemark.schema import parse_column
from tidemark.tableformat import table_format

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Where a partition of a value new to an hour points until the hour's one move: inside its new
# directory, holding no files (a hidden name: never read as part of the version)
PENDING = "_tidemark_pending"


def emptied(location: str) -> str:
    """A location holding no files, for a partition value whose rows must vanish in a switch."""
    location = location.rstrip("/")
    return location if location.endswith(f"/{PENDING}") else f"{location}/{PENDING}"


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def quote_value(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def qualified(table: str) -> str:
    return f"{quote_identifier(DATABASE)}.{quote_identifier(table)}"


def external_parquet_sql(
    table: str,
    columns: Sequence[tuple[str, str]],
    partitions: Sequence[str],
    location: Path | str,
    stored_as: str = "PARQUET",
) -> str:
    """CREATE EXTERNAL TABLE IF NOT EXISTS over Parquet (or ``stored_as``) files, string
    partition columns."""
    data = ", ".join(f"{quote_identifier(n)} {t}" for n, t in columns)
    partitioned = ", ".join(f"{quote_identifier(p)} string" for p in partitions)
    return (
        f"CREATE EXTERNAL TABLE IF NOT EXISTS {qualified(table)} ({data}) "
        f"PARTITIONED BY ({partitioned}) STORED AS {stored_as} LOCATION {quote_value(str(location))}"
    )


def create_table_sql(config: TableConfig, table: str, location: Path | str) -> str:
    """External table with the config's columns, MQ lineage and partition columns: the table
    itself in its ``output.format``, its late side table in Parquet (``tableformat.py``)."""
    stored_as = table_format(config).stored_as if table == config.table else "PARQUET"
    return external_parquet_sql(table, data_fields(config), partition_columns(config), location, stored_as)


def add_columns_sql(table: str, columns: Sequence[tuple[str, str]]) -> str:
    data = ", ".join(f"{quote_identifier(n)} {t}" for n, t in columns)
    return f"ALTER TABLE {qualified(table)} ADD COLUMNS ({data})"


def partition_values_sql(spec: Mapping[str, str]) -> str:
    return ", ".join(f"{quote_identifier(k)}={quote_value(v)}" for k, v in spec.items())


def add_partition_sql(table: str, spec: Mapping[str, str], location: Path | str) -> str:
    return (
        f"ALTER TABLE {qualified(table)} ADD IF NOT EXISTS PARTITION ({partition_values_sql(spec)}) "
        f"LOCATION {quote_value(str(location))}"
    )


def drop_partition_sql(table: str, spec: Mapping[str, str]) -> str:
    """Unregister a partition of an external table (its files stay)."""
    return f"ALTER TABLE {qualified(table)} DROP IF EXISTS PARTITION ({partition_values_sql(spec)})"


class Metastore(Protocol):
    """Where a table's partitions are registered: the session's Hive client
    (``HiveClientMetastore``) or a metastore service's Thrift API (``thrift_metastore``);
    ``thrift_metastore.open_metastore`` chooses once per job."""

    def connect(self) -> None: ...

    def ensure_table(self, table: str, location: Path | str) -> None: ...

    def add_partitions(
        self, table: str, partitions: Sequence[tuple[Mapping[str, str], Path | str]]
    ) -> None: ...

    def switch_partitions(
        self, table: str, hour_spec: Mapping[str, str], partitions: Sequence[tuple[Mapping[str, str], str]]
    ) -> None: ...

    def partition_locations(self, table: str) -> list[str]: ...

    def partition_names(self, table: str) -> list[str]: ...

    def drop_partitions(self, table: str, names: Sequence[str]) -> None:
        """Unregister partitions by name (``dt=.../hr=...``); their files stay."""

    def refresh(self, table: str) -> None:
        """Drop the job's session's cached listing of a table whose registered files changed."""


class HiveClientMetastore:
    """Runs the DDL through the session's Hive client (embedded Derby or a metastore service)."""

    def __init__(self, spark: SparkSession, config: TableConfig) -> None:
        self.spark = spark
        self.config = config
        self._ensured: set[tuple[str, str]] = set()  # (table, location) brought up to date by this job

    def connect(self) -> None:
        """Start the session's Hive client (embedded Derby boots, or the thrift connection
        opens): the first DDL's fixed cost, paid here when called ahead of time."""
        self.spark.catalog.databaseExists("default")

    def ensure_table(self, table: str, location: Path | str) -> None:
        """Create the table if missing, else bring its columns to the config's schema: once per
        job and table (a seal of ten hours registers ten times)."""
        if (table, str(location)) in self._ensured:
            return
        if isinstance(location, Path):
            location.mkdir(parents=True, exist_ok=True)
        self.spark.sql(create_table_sql(self.config, table, location))
        evolve_table(self.spark, table, data_fields(self.config), partition_columns(self.config))
        self._ensured.add((table, str(location)))

    def add_partitions(self, table: str, partitions: Sequence[tuple[Mapping[str, str], Path | str]]) -> None:
        """Register partitions (those registered already keep their location: the local disk,
        where an hour's directory never moves)."""
        for spec, location in partitions:
            self.spark.sql(add_partition_sql(table, spec, location))
            log.info("%s: registered partition %s at %s", table, dict(spec), location)

    def switch_partitions(
        self, table: str, hour_spec: Mapping[str, str], partitions: Sequence[tuple[Mapping[str, str], str]]
    ) -> None:
        """Object stores: point an hour's partitions (one per value of the extra partition
        columns) at a new version's directories. New values are first added at a location
        holding no files (``PENDING`` inside their new directory); then every value moves in
        **one** ``alter_partitions`` call, which the metastore applies in one transaction, so
        readers never see some values of the hour at the old version and others at the new;
        values the new version lacks move in the same call to a location holding no files, and
        are dropped after it (a kill in between shows none of their old rows; the files stay,
        for the collector)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        catalog = self.spark._jsparkSession.sessionState().catalog().externalCatalog()
        wanted = {tuple(sorted(spec.items())): location for spec, location in partitions}
        current = self._partitions(table, hour_spec)
        added = [key for key in wanted if key not in current]
        for key in added:
            self.spark.sql(add_partition_sql(table, dict(key), f"{wanted[key]}/{PENDING}"))
        if added:
            crash_point("mid_partition_switch")
            current.update(self._partitions(table, hour_spec))
        moved = []
        for key, part in current.items():
            location = str(part.location().toString())
            new_location = wanted.get(key) or emptied(location)  # a value the version lacks: no rows
            if location == new_location:
                continue
            storage = part.storage()
            new_storage = storage.copy(
                jvm.scala.Some(jvm.java.net.URI(new_location)),
                storage.inputFormat(),
                storage.outputFormat(),
                storage.serde(),
                storage.compressed(),
                storage.properties(),
            )
            moved.append(
                part.copy(
                    part.spec(),
                    new_storage,
                    part.parameters(),
                    part.createTime(),
                    part.lastAccessTime(),
                    part.stats(),
                )
            )
        if moved:
            as_list = jvm.java.util.ArrayList()
            for part in moved:
                as_list.add(part)
            catalog.alterPartitions(
                DATABASE, table, jvm.org.apache.spark.api.python.PythonUtils.toSeq(as_list)
            )
        gone = [dict(key) for key in current if key not in wanted]
        if gone:
            crash_point("before_dropping_gone_values")  # emptied already: no old row shows
        for dropped in gone:
            self.spark.sql(drop_partition_sql(table, dropped))
        for spec, location in partitions:
            log.info("%s: registered partition %s at %s", table, dict(spec), location)
        if gone:
            log.info("%s: dropped partitions %s (not in the new version)", table, gone)

    def _partitions(self, table: str, hour_spec: Mapping[str, str]) -> dict[tuple[tuple[str, str], ...], Any]:
        """The catalog's partitions of one hour, by their sorted spec."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None
        catalog = self.spark._jsparkSession.sessionState().catalog().externalCatalog()
        found = {}
        listed = catalog.listPartitions(
            DATABASE, table, jvm.scala.Some(_scala_map(jvm, hour_spec))
        ).iterator()
        while listed.hasNext():
            part = listed.next()
            found[tuple(sorted(_python_map(part.spec()).items()))] = part
        return found

    def partition_locations(self, table: str) -> list[str]:
        """Where each partition of ``table`` points readers now (none for a missing table): one
        call to the catalog, whatever the number of partitions."""
        jspark = self.spark._jsparkSession
        catalog = jspark.sessionState().catalog().externalCatalog()
        if not catalog.tableExists(DATABASE, table):
            return []
        none = self.spark.sparkContext._jvm.scala.Option.empty()  # type: ignore[union-attr]
        partitions = catalog.listPartitions(DATABASE, table, none).iterator()
        locations = []
        while partitions.hasNext():
            location = partitions.next().location()
            locations.append(str(location.toString()))
        return locations

    def partition_names(self, table: str) -> list[str]:
        if not self.spark.catalog.tableExists(qualified(table)):
            return []
        return [r[0] for r in self.spark.sql(f"SHOW PARTITIONS {qualified(table)}").collect()]

    def drop_partitions(self, table: str, names: Sequence[str]) -> None:
        for name in names:
            self.spark.sql(drop_partition_sql(table, partition_spec_of(name)))

    def refresh(self, table: str) -> None:
        if spark_started(self.spark):  # a session that never started has no listing cached
            self.spark.catalog.refreshTable(qualified(table))


def partition_spec_of(name: str) -> dict[str, str]:
    """``dt=2026-11-22/hr=10`` -> its spec (Hive escapes special characters as ``%XX``)."""
    return {unquote(k): unquote(v) for k, _, v in (part.partition("=") for part in name.split("/"))}


def evolve_table(
    spark: SparkSession, table: str, columns: Sequence[tuple[str, str]], partitions: Sequence[str]
) -> list[str]:
    """Bring an existing table's data columns to ``columns`` (a compatible change, checked by
    :mod:`tidemark.evolution` when the job started): new columns by ``ADD COLUMNS``, widened
    types through the session catalog, since Spark SQL refuses type changes of Hive tables
    (``ALTER TABLE ... CHANGE COLUMN``). Old partitions keep their files: Spark reads them
    under the table's schema (missing columns as null, narrower numbers promoted). Returns
    the changes made; none for a table already up to date."""
    from pyspark.sql.types import StructField, StructType

    current = [f for f in spark.table(qualified(table)).schema.fields if f.name not in partitions]
    by_name = {f.name.lower(): f for f in current}
    wanted = {name.lower(): parse_column(name, ddl).type for name, ddl in columns}
    added = [(name, ddl) for name, ddl in columns if name.lower() not in by_name]
    # only widenings: a step re-reading an old hour under its older schema never narrows
    widened = {
        f.name: wanted[f.name.lower()]
        for f in current
        if f.name.lower() in wanted
        and is_widening(parse_column(f.name, f.dataType.simpleString()).type, wanted[f.name.lower()])
    }
    changes: list[str] = []
    if widened:
        schema = StructType(
            [
                StructField(f.name, widened[f.name].to_spark(), True) if f.name in widened else f
                for f in current
            ]
        )
        jspark = spark._jsparkSession
        jspark.sessionState().catalog().externalCatalog().alterTableDataSchema(
            DATABASE, table, jspark.parseDataType(schema.json())
        )
        changes += [
            f"{name}: {by_name[name.lower()].dataType.simpleString()} -> {kind.ddl()}"
            for name, kind in widened.items()
        ]
    if added:
        spark.sql(add_columns_sql(table, added))
        changes += [f"{name} {ddl} added" for name, ddl in added]
    if changes:
        spark.catalog.refreshTable(qualified(table))
        log.warning("%s: table schema evolved: %s", table, "; ".join(changes))
    return changes


def _scala_map(jvm: Any, values: Mapping[str, str]) -> Any:
    """A Scala immutable Map of strings (a partition spec for the external catalog)."""
    java = jvm.java.util.HashMap()
    for key, value in values.items():
        java.put(key, value)
    return jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(java)


def _python_map(scala_map: Any) -> dict[str, str]:
    found = {}
    entries = scala_map.iterator()
    while entries.hasNext():
        entry = entries.next()
        found[str(entry._1())] = str(entry._2())
    return found
