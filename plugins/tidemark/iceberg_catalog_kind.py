"""The seam between tidemark and an Iceberg catalog: one class per kind of catalog, chosen
once from ``TIDEMARK_ICEBERG_CATALOG_URI`` (``tidemark.iceberg_catalog.catalog_kind``). Each
kind says how pyiceberg opens it (tidemark's reads: plans, summaries, tags), which properties
Iceberg's Java library takes for it (the seal's writes, Spark's ``SparkCatalog``) and how
Trino's Iceberg connector names it; the rest of tidemark never asks which kind it is.

This module holds the interface and the SQL catalog (``sqlite:///<file>`` by default,
``postgresql+<driver>://...`` in production): Iceberg's JDBC catalog keeps one row per table
and commits by a conditional UPDATE of its metadata location; pyiceberg's ``SqlCatalog`` and
Iceberg's Java ``JdbcCatalog`` share its tables. ``tidemark.iceberg_rest`` holds the REST
catalog.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tidemark.errors import ConfigError
from tidemark.masking import mask_text
from tidemark.settings import Settings
from tidemark.tablefs import s3_from_environment

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

NAMESPACE = "default"  # as the Hive tables' database (seal.metastore.DATABASE)


class CatalogKind(ABC):
    """How tidemark, Spark and the readers reach one kind of Iceberg catalog."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @abstractmethod
    def open(self) -> Catalog:
        """pyiceberg's catalog, its namespace created if missing."""

    @abstractmethod
    def java_properties(self) -> dict[str, str]:
        """The catalog's properties as Iceberg's Java library takes them (``SparkCatalog``'s
        options, ``CatalogUtil.buildIcebergCatalog``'s)."""

    @abstractmethod
    def trino_properties(self) -> dict[str, str]:
        """Trino's Iceberg connector on this catalog (without its file system's settings)."""

    def secret_properties(self) -> frozenset[str]:
        """Property names whose values are secrets: never on a command line or in a log."""
        return frozenset()

    def describe(self) -> str:
        """The catalog in messages: its URL, credentials masked."""
        return mask_text(self.settings.iceberg_catalog_url)

    def named(self, exc: BaseException, operation: str) -> BaseException:
        """The named error of a failure this kind knows (a refused credential, no answer),
        else ``exc`` itself."""
        return exc


def s3_properties() -> dict[str, str]:
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


def create_namespace(catalog: Catalog) -> None:
    """The namespace tidemark's tables live in, created once whoever gets there first."""
    try:
        catalog.create_namespace_if_not_exists(NAMESPACE)
    except Exception:  # created by another process or thread at the same moment
        if not catalog.namespace_exists(NAMESPACE):
            raise


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
            "TIDEMARK_ICEBERG_CATALOG_URI: expected sqlite:///<file>, postgresql+<driver>://... or "
            f"http(s)://... (a REST catalog), got {url.split('://', maxsplit=1)[0]}://..."
        ],
    )


class SqlCatalogKind(CatalogKind):
    """Iceberg's SQL (JDBC) catalog: SQLite by default, PostgreSQL in production."""

    def open(self) -> Catalog:
        from pyiceberg.catalog.sql import SqlCatalog

        url = self.settings.iceberg_catalog_url
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        catalog = SqlCatalog(self.settings.iceberg_catalog, uri=url, **s3_properties())
        create_namespace(catalog)
        return catalog

    def java_properties(self) -> dict[str, str]:
        url, credentials = jdbc_url(self.settings.iceberg_catalog_url)
        return {
            "type": "jdbc",
            "uri": url,
            "warehouse": self.settings.warehouse,
            **{f"jdbc.{k}": v for k, v in credentials.items()},
        }

    def trino_properties(self) -> dict[str, str]:
        """Trino's JDBC catalog reads PostgreSQL, not SQLite."""
        url = urlsplit(self.settings.iceberg_catalog_url)
        if not url.scheme.startswith("postgres"):
            raise ConfigError(
                "environment",
                [
                    f"TIDEMARK_ICEBERG_CATALOG_URI: Trino's JDBC catalog reads PostgreSQL, not {url.scheme}: "
                    "use postgresql+pg8000://user:password@host:port/db or a REST catalog"
                ],
            )
        return {
            "connector.name": "iceberg",
            "iceberg.catalog.type": "jdbc",
            "iceberg.jdbc-catalog.catalog-name": self.settings.iceberg_catalog,
            "iceberg.jdbc-catalog.driver-class": "org.postgresql.Driver",
            "iceberg.jdbc-catalog.connection-url": f"jdbc:postgresql://{url.hostname}:{url.port or 5432}{url.path}",
            "iceberg.jdbc-catalog.connection-user": url.username or "",
            "iceberg.jdbc-catalog.connection-password": url.password or "",
            "iceberg.jdbc-catalog.default-warehouse-dir": self.settings.warehouse,
        }

    def secret_properties(self) -> frozenset[str]:
        return frozenset({"jdbc.password"})
