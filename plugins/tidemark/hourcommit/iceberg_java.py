"""The creation of an Iceberg hour table, by Iceberg's own Java library: the runtime for
Spark that the job's session carries (jvm/pom.xml's ``iceberg`` profile, on the driver's
class path: ``tidemark.jobs.table_session_conf``), reached through the session's Py4J gateway
(the seal's lazy session starts here, once per table).

Spark's Iceberg runtime is the reference implementation every other reader and writer of
the table follows: the table is created by it, from the first hour's columns, with identity
partitions by the hour's columns (``dt``, ``hr``: the table's zone, DST's repeated hour its
own partition) and the data-derived ones, format version 2 and no retry inside the library
(a commit that lost a race is planned again by tidemark), in one plain create. The hours'
commits are calls to the catalog (``iceberg_commit``, pyiceberg): they add files tidemark
wrote and need no engine.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from tidemark.errors import IcebergRuntimeMissingError
from tidemark.iceberg_catalog import catalog_kind
from tidemark.iceberg_rest import JAVA_UNANSWERED
from tidemark.java_errors import java_class
from tidemark.lazy_session import spark_context
from tidemark.settings import Settings

if TYPE_CHECKING:
    import pyarrow as pa

# what the library raises when a racing step created the table, or when the creation's answer
# never came (a REST catalog's timeout or 5xx): the table is looked for again, not failed
NOT_CREATED_HERE = (
    "org.apache.iceberg.exceptions.CommitFailedException",
    "org.apache.iceberg.exceptions.ValidationException",
    "org.apache.iceberg.exceptions.AlreadyExistsException",
    "org.apache.iceberg.exceptions.CommitStateUnknownException",
    *JAVA_UNANSWERED,
)


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
                f"{self.table}: an Iceberg table is created by Iceberg's runtime for Spark: "
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
            if java_class(exc) not in NOT_CREATED_HERE:
                raise self.kind.named(exc, f"creating the table of {self.table}") from exc

    def _schema(self, schema: pa.Schema) -> Any:
        """An Arrow schema as Iceberg's Java ``Schema`` (pyiceberg's conversion of Arrow types,
        fresh ids: the table assigns its own)."""
        from pyiceberg.catalog import Catalog
        from pyiceberg.schema import assign_fresh_schema_ids

        converted = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))
        return self.jvm.org.apache.iceberg.SchemaParser.fromJson(converted.model_dump_json())
