"""The Iceberg catalog of tables with ``output.table_format: iceberg`` and of Iceberg CDC
snapshots: opened by pyiceberg to read them, by Iceberg's Java library in the job's Spark
runtime to write them (``hourcommit.iceberg_java``, from ``spark_catalog_conf``), and
described for readers (Spark's ``SparkCatalog``, pyiceberg, DuckDB, Trino) from the same
settings. Its kind is chosen once, here, from ``TIDEMARK_ICEBERG_CATALOG_URI``
(``iceberg_catalog_kind``): a SQL catalog (SQLite, PostgreSQL) or a REST catalog
(``iceberg_rest``).

Why not the Hive metastore: Iceberg's metastore commits take metastore locks, which need the
metastore's transaction tables; the Hive 2.3 metastore here (embedded Derby or the service)
cannot serve them (its lock call fails on the missing BoneCP pool, and embedded Derby admits
one process at a time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemark.iceberg_catalog_kind import NAMESPACE, CatalogKind, SqlCatalogKind
from tidemark.iceberg_rest import RestCatalogKind
from tidemark.jvm_jars import require_jars
from tidemark.settings import Settings
from tidemark.spark import driver_class_path

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
# Spark's default redaction, plus the REST catalog's OAuth2 credential (its Environment tab)
REDACTION = r"(?i)secret|password|token|access[.]key|credential"


def catalog_kind(settings: Settings) -> CatalogKind:
    """The settings' catalog: REST for an ``http(s)://`` URI, else SQL."""
    if settings.iceberg_catalog_url.split("://", maxsplit=1)[0] in ("http", "https"):
        return RestCatalogKind(settings)
    return SqlCatalogKind(settings)


def open_catalog(settings: Settings) -> Catalog:
    """pyiceberg's catalog of the settings, its namespace created if missing."""
    return catalog_kind(settings).open()


def identifier(table: str) -> str:
    return f"{NAMESPACE}.{table}"


def spark_catalog_conf(settings: Settings) -> dict[str, str]:
    """Spark conf of a session that reads (and writes) the Iceberg tables by name as
    ``<catalog>.default.<table>``: Iceberg's runtime for Spark (jvm/pom.xml's ``iceberg``
    profile) on the class path, its ``SparkCatalog`` over the settings' catalog. Secrets
    included: ``launch_conf`` keeps them off the command line (``secret_conf_keys``)."""
    prefix = f"spark.sql.catalog.{settings.iceberg_catalog}"
    jars = require_jars("iceberg")
    # the JDBC driver must be on the driver's own class path (DriverManager), beside the
    # session's own (JDBC drivers; s3a for a warehouse on S3: Iceberg reads s3a:// through it)
    class_path = [p for p in (driver_class_path(settings), *jars) if p]
    return {
        "spark.jars": ",".join(jars),
        "spark.driver.extraClassPath": ":".join(class_path),
        "spark.redaction.regex": REDACTION,
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        # every read sees the newest commit (pyiceberg commits beside the session: tags, seals)
        f"{prefix}.cache-enabled": "false",
        **{f"{prefix}.{k}": v for k, v in catalog_kind(settings).java_properties().items()},
    }


def secret_conf_keys(settings: Settings) -> frozenset[str]:
    """The Spark conf keys of ``spark_catalog_conf`` whose values are secrets."""
    prefix = f"spark.sql.catalog.{settings.iceberg_catalog}"
    return frozenset(f"{prefix}.{k}" for k in catalog_kind(settings).secret_properties())


def iceberg_writer_conf(settings: Settings) -> dict[str, str]:
    """A session that also writes Iceberg with Spark (``MERGE INTO``, procedures such as
    ``expire_snapshots``): the catalog and Iceberg's SQL extensions."""
    return {**spark_catalog_conf(settings), "spark.sql.extensions": EXTENSIONS}
