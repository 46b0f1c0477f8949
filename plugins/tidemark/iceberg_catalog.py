"""The Iceberg catalog of tables with ``output.table_format: iceberg``: opened by pyiceberg to
read them, by Iceberg's Java library in the job's Spark runtime to write them
(``hourcommit.iceberg_java``, from ``spark_catalog_conf``), and described for readers (Spark's
``SparkCatalog``, pyiceberg, DuckDB, Trino) from the same settings.

Why a SQL catalog and not the Hive metastore: Iceberg's metastore commits take metastore locks,
which need the metastore's transaction tables; the Hive 2.3 metastore here (embedded Derby or
the service) cannot serve them (its lock call fails on the missing BoneCP pool, and embedded
Derby admits one process at a time). Iceberg's JDBC catalog keeps one row per table and commits
by a conditional UPDATE of its metadata location: on SQLite by default (a file in the home),
on PostgreSQL in production (``TIDEMARK_ICEBERG_CATALOG_URI``, the database beside the
metastore's). pyiceberg's ``SqlCatalog`` and Iceberg's Java ``JdbcCatalog`` share its tables.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tidemark.errors import ConfigError
from tidemark.jvm_jars import require_jars
from tidemark.settings import Settings
from tidemark.spark import driver_class_path
from tidemark.tablefs import s3_from_environment

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

log = logging.getLogger(__name__)

NAMESPACE = "default"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"  # as the Hive tables' database (seal.metastore.DATABASE)


def open_catalog(settings: Settings) -> SqlCatalog:
    """pyiceberg's SQL catalog on the settings' database (its tables created if missing)."""
    from pyiceberg.catalog.sql import SqlCatalog

    url = settings.iceberg_catalog_url
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    properties = {"uri": url, **_s3_properties()}
    catalog = SqlCatalog(settings.iceberg_catalog, **properties)
    try:
        catalog.create_namespace_if_not_exists(NAMESPACE)
    except Exception:  # created by another process or thread at the same moment
        if not catalog.namespace_exists(NAMESPACE):
            raise
    return catalog


def identifier(table: str) -> str:
    return f"{NAMESPACE}.{table}"


def _s3_properties() -> dict[str, str]:
    """pyiceberg's S3 FileIO from the ``AWS_*`` environment (as tidemark's own store)."""
    s3 = s3_from_environment()
    names = {
        "endpoint": "s3.endpoint",
        "region": "s3.region",
        "access_key": "s3.access-key-id",
        "secret_key": "s3.secret-access-key",
        "session_token": "s3.session-token",
    }
    return {names[k]: v for k, v in s3.items()}


def jdbc_url(url: str) -> tuple[str, dict[str, str]]:
    """The SQLAlchemy URL as Iceberg's ``JdbcCatalog`` takes it: (JDBC URL, user and password)."""
    if url.startswith("sqlite:///"):
        return f"jdbc:sqlite:{url.removeprefix('sqlite:///')}", {}
    parts = urlsplit(url)
    if parts.scheme.split("+")[0] in ("postgresql", "postgres"):
        credentials = {"user": parts.username or "", "password": parts.password or ""}
        port = f":{parts.port}" if parts.port else ""
        return f"jdbc:postgresql://{parts.hostname}{port}{parts.path}", {
            k: v for k, v in credentials.items() if v
        }
    raise ConfigError(
        "environment",
        [
            f"TIDEMARK_ICEBERG_CATALOG_URI: expected sqlite:///<file> or postgresql+<driver>://..., got {url.split('://', maxsplit=1)[0]}://..."
        ],
    )


def spark_catalog_conf(settings: Settings) -> dict[str, str]:
    """Spark conf of a session that reads (and writes) the Iceberg tables by name as
    ``<catalog>.default.<table>``: Iceberg's runtime for Spark (jvm/pom.xml's ``iceberg``
    profile) on the class path, its ``SparkCatalog`` over the same SQL catalog."""
    url, credentials = jdbc_url(settings.iceberg_catalog_url)
    prefix = f"spark.sql.catalog.{settings.iceberg_catalog}"
    jars = require_jars("iceberg")
    # the JDBC driver must be on the driver's own class path (DriverManager), beside the
    # session's own (JDBC drivers; s3a for a warehouse on S3: Iceberg reads s3a:// through it)
    class_path = [p for p in (driver_class_path(settings), *jars) if p]
    conf = {
        "spark.jars": ",".join(jars),
        "spark.driver.extraClassPath": ":".join(class_path),
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": url,
        f"{prefix}.warehouse": settings.warehouse,
        # every read sees the newest commit (pyiceberg commits beside the session: tags, seals)
        f"{prefix}.cache-enabled": "false",
        **{f"{prefix}.jdbc.{k}": v for k, v in credentials.items()},
    }
    return conf


def iceberg_writer_conf(settings: Settings) -> dict[str, str]:
    """A session that also writes Iceberg with Spark (``MERGE INTO``, procedures such as
    ``expire_snapshots``): the catalog and Iceberg's SQL extensions."""
    return {**spark_catalog_conf(settings), "spark.sql.extensions": EXTENSIONS}
