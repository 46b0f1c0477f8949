"""The writes of an Iceberg hour table, done by Iceberg's own Java library: the runtime for
Spark that the job's session carries (jvm/pom.xml's ``iceberg`` profile, on the driver's
class path: ``tidemark.jobs.table_session_conf``), reached through the session's Py4J gateway.

Spark's Iceberg runtime is the reference implementation every other reader and writer of
the table follows; tidemark's seal writes the hour's files itself (pyarrow tasks, compacted,
named by content, a marker last) and hands them to it in one commit, the way Iceberg's
``add_files`` imports existing files. Reading the table's metadata (plans, summaries, live
files) stays in pyiceberg: no JVM needed to look.

- **create**: the table from the first hour's columns, identity partitions by the hour's
  columns (``dt``, ``hr``: the table's zone, DST's repeated hour its own partition) and the
  data-derived ones, format version 2 and no retry inside the library (a commit that lost a
  race is planned again by tidemark), in one plain create;
- **commit**: in one transaction, the columns evolved (by name) where the files bring new or
  wider ones, the name mapping set where they did or where the table has none yet (the files
  carry no field ids; one property update per commit, which Nessie's REST catalog requires),
  then one overwrite that removes every file of the hour and adds the version's,
  its statistics read from each footer by Iceberg, the summary tidemark's record. The
  overwrite is validated from the snapshot the step planned on: a commit of the hour by
  anyone since, or any commit in between (no retry), fails as a lost race.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tidemark.errors import IcebergRuntimeMissingError
from tidemark.iceberg_catalog import catalog_kind
from tidemark.iceberg_rest import JAVA_UNANSWERED
from tidemark.java_errors import java_class, java_message
from tidemark.lazy_session import spark_context
from tidemark.settings import Settings

if TYPE_CHECKING:
    import pyarrow as pa

NAME_MAPPING = "schema.name-mapping.default"
# what the library raises when another commit won: planned again, not failed
LOST_RACE = (
    "org.apache.iceberg.exceptions.CommitFailedException",
    "org.apache.iceberg.exceptions.ValidationException",
)
ALREADY_EXISTS = "org.apache.iceberg.exceptions.AlreadyExistsException"


# what the library raises when a commit's answer never came (a REST catalog's timeout or 5xx):
# it may have landed; planned again, the step finds its own commit in the summaries if it did
UNKNOWN_OUTCOME = ("org.apache.iceberg.exceptions.CommitStateUnknownException", *JAVA_UNANSWERED)


class LostRaceError(Exception):
    """Another writer committed first (Iceberg's optimistic concurrency), or the commit's
    answer never came (``unknown``: it may have landed): plan again."""

    def __init__(self, message: str, *, unknown: bool = False) -> None:
        super().__init__(message)
        self.unknown = unknown


class JavaIceberg:
    """One table's catalog in Iceberg's Java library, opened once, through the active Spark
    session's gateway."""

    def __init__(self, settings: Settings, table: str) -> None:
        self.settings = settings
        self.table = table  # tidemark's name, for messages
        self._catalog: Any = None
        self._opening = threading.Lock()
        self.kind = catalog_kind(settings)

    def _context(self) -> Any:
        """The active SparkContext: its gateway and its Hadoop conf."""
        context = spark_context()  # the seal's session starts here if nothing started it before
        if context is None:
            raise IcebergRuntimeMissingError(
                f"{self.table}: an Iceberg table's commits run in Iceberg's runtime for Spark: "
                "no Spark session is active in this process (run the job through spark_jobs/)"
            )
        return context

    @property
    def jvm(self) -> Any:
        return self._context()._jvm

    @property
    def catalog(self) -> Any:
        """The settings' catalog (SQL or REST) as Spark's ``SparkCatalog`` opens it."""
        with self._opening:
            if self._catalog is None:
                context = self._context()
                options = {"cache-enabled": "false", **self.kind.java_properties()}
                hadoop = context._jsc.hadoopConfiguration()
                try:
                    util = context._jvm.org.apache.iceberg.CatalogUtil
                    self._catalog = util.buildIcebergCatalog(self.settings.iceberg_catalog, options, hadoop)
                except Exception as exc:
                    # no runtime: Py4J's own errors (a package where a class should be), not Java's
                    missing = ("JavaPackage", "CatalogUtil", "does not exist in the JVM")
                    if java_class(exc) is None and any(m in str(exc) for m in missing):
                        raise IcebergRuntimeMissingError(
                            f"{self.table}: Iceberg's runtime for Spark is not on the job's class path "
                            "(tidemark.jobs.table_session_conf gives a job of an Iceberg table; "
                            "`make jvm` fetches it)"
                        ) from exc
                    raise self.kind.named(exc, f"opening it for {self.table}") from exc
            return self._catalog

    def _identifier(self, identifier: str) -> Any:
        return self.jvm.org.apache.iceberg.catalog.TableIdentifier.parse(identifier)  # "namespace.name"

    def create(
        self,
        identifier: str,
        schema: pa.Schema,
        partitions: list[str],
        location: str,
        properties: dict[str, str],
    ) -> None:
        """Create the table (see the module); one created by a racing step is left as it is, and
        a creation refused or unanswered is for the caller to find out (it loads the table)."""
        jvm = self.jvm
        java_schema = self._schema(schema)
        spec = jvm.org.apache.iceberg.PartitionSpec.builderFor(java_schema)
        for column in partitions:
            spec = spec.identity(column)
        try:  # one plain create: its name mapping comes with the first commit (``commit``)
            (
                self.catalog.buildTable(self._identifier(identifier), java_schema)
                .withPartitionSpec(spec.build())
                .withLocation(location)
                .withProperties(properties)
                .create()
            )
        except Exception as exc:
            # made by a racing step, refused, or unanswered: the caller looks for the table again
            if java_class(exc) not in (ALREADY_EXISTS, *LOST_RACE, *UNKNOWN_OUTCOME):
                raise self.kind.named(exc, f"creating the table of {self.table}") from exc

    def commit(
        self,
        identifier: str,
        *,
        planned_on: int | None,
        hour: dict[str, str],
        files: list[tuple[dict[str, str], str]],
        evolve_to: pa.Schema | None,
        summary: dict[str, str],
    ) -> None:
        """Replace the files of ``hour`` (``dt``/``hr`` values) by ``files`` ((partition values,
        location) each) in one snapshot; LostRaceError if another commit came first."""
        jvm = self.jvm
        iceberg = jvm.org.apache.iceberg
        expressions = iceberg.expressions.Expressions
        try:
            table = self.catalog.loadTable(self._identifier(identifier))
            tx = table.newTransaction()
            if evolve_to is not None:
                tx.updateSchema().unionByNameWith(self._schema(evolve_to)).commit()
            if evolve_to is not None or tx.table().properties().get(NAME_MAPPING) is None:
                self._map_names(tx)  # one property update per commit: Nessie refuses two
            current = tx.table()
            spec = current.spec()
            mapping = iceberg.mapping.NameMappingParser.fromJson(current.properties().get(NAME_MAPPING))
            metrics = iceberg.MetricsConfig.forTable(current)
            parquet = iceberg.FileFormat.valueOf("PARQUET")
            where = None
            for column, value in hour.items():
                equal = expressions.equal(column, value)
                where = equal if where is None else getattr(expressions, "and")(where, equal)
            overwrite = tx.newOverwrite().overwriteByRowFilter(where).conflictDetectionFilter(where)
            overwrite = overwrite.validateNoConflictingData().validateNoConflictingDeletes()
            if files:  # an hour without rows is a commit too: its summary says it was sealed
                overwrite = overwrite.validateAddedFilesMatchOverwriteFilter()
            if planned_on is not None:
                overwrite = overwrite.validateFromSnapshot(planned_on)
            for values, location in files:
                source = current.io().newInputFile(location)
                data_file = (
                    iceberg.DataFiles.builder(spec)
                    .withPath(location)
                    .withFormat(parquet)
                    .withFileSizeInBytes(source.getLength())
                    .withPartitionPath(_partition_path(spec, values))
                    .withMetrics(iceberg.parquet.ParquetUtil.fileMetrics(source, metrics, mapping))
                    .build()
                )
                overwrite = overwrite.addFile(data_file)
            for key, value in summary.items():
                overwrite = overwrite.set(key, value)
            overwrite.commit()
            tx.commitTransaction()
        except Exception as exc:
            raise self._replan_or_name(exc) from exc

    def delete_before(self, identifier: str, dt: str, hr: str, summary: dict[str, str]) -> None:
        """One snapshot dropping the files of every hour before (``dt``, ``hr``): the hours'
        identity partitions compare as text in time order, so whole files go and no row is
        rewritten; LostRaceError if another commit came first."""
        expressions = self.jvm.org.apache.iceberg.expressions.Expressions
        either, both = getattr(expressions, "or"), getattr(expressions, "and")
        before = either(
            expressions.lessThan("dt", dt), both(expressions.equal("dt", dt), expressions.lessThan("hr", hr))
        )
        try:
            delete = (
                self.catalog.loadTable(self._identifier(identifier)).newDelete().deleteFromRowFilter(before)
            )
            for key, value in summary.items():
                delete = delete.set(key, value)
            delete.commit()
        except Exception as exc:
            raise self._replan_or_name(exc) from exc

    def _replan_or_name(self, exc: Exception) -> BaseException:
        """A lost race or an unknown outcome as ``LostRaceError`` (planned again), a refused
        credential or a silent catalog by name, anything else as it is."""
        if java_class(exc) in LOST_RACE:
            return LostRaceError(java_message(exc))
        named = self.kind.named(exc, f"committing to {self.table}")
        return LostRaceError(str(named), unknown=True) if java_class(exc) in UNKNOWN_OUTCOME else named

    def _schema(self, schema: pa.Schema) -> Any:
        """An Arrow schema as Iceberg's Java ``Schema`` (pyiceberg's conversion of Arrow types,
        fresh ids: the table assigns its own)."""
        from pyiceberg.catalog import Catalog
        from pyiceberg.schema import assign_fresh_schema_ids

        converted = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))
        return self.jvm.org.apache.iceberg.SchemaParser.fromJson(converted.model_dump_json())

    def _map_names(self, tx: Any) -> None:
        """Files carry no Iceberg field ids: readers resolve their columns by name."""
        mapping = self.jvm.org.apache.iceberg.mapping
        json = mapping.NameMappingParser.toJson(mapping.MappingUtil.create(tx.table().schema()))
        tx.updateProperties().set(NAME_MAPPING, json).commit()


def _partition_path(spec: Any, values: dict[str, str]) -> str:
    """``col=value/...`` in the spec's order (escaped as Iceberg parses it)."""
    schema = spec.schema()
    names = [schema.findColumnName(field.sourceId()) for field in spec.fields()]
    return "/".join(f"{name}={quote(values[name], safe='')}" for name in names)
