"""DuckDB as a reader of tidemark's Iceberg tables and Delta snapshots, with its ``iceberg``,
``avro``, ``delta`` and ``httpfs`` extensions loaded from their PyPI wheels (``duckdb-extension-*``, pinned with
duckdb): no download from extensions.duckdb.org, which a machine without internet cannot
reach. An S3 endpoint of the ``AWS_*`` environment becomes DuckDB's S3 secret; an Iceberg REST
catalog is attached by name (``attach_rest_catalog``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tidemark.iceberg_rest import RestCatalogKind
from tidemark.settings import Settings
from tidemark.tablefs import s3_from_environment


def duckdb_connection() -> Any:
    """An in-memory DuckDB that reads Iceberg tables (``iceberg_scan(<metadata file>)``) and
    Delta tables (``delta_scan(<directory>, version => N)``)."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_delta
    import duckdb_extension_httpfs
    import duckdb_extension_iceberg

    connection = duckdb.connect()
    extensions = (
        duckdb_extension_httpfs,
        duckdb_extension_avro,
        duckdb_extension_iceberg,
        duckdb_extension_delta,
    )
    for module in extensions:
        (path,) = Path(module.__file__ or "").parent.rglob("*.duckdb_extension")
        connection.sql(f"LOAD '{path}'")
    s3 = s3_from_environment()
    if s3.get("endpoint"):
        endpoint = urlsplit(s3["endpoint"])
        connection.execute(
            "CREATE SECRET tidemark_s3 (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL ?)",
            [
                s3.get("access_key", ""),
                s3.get("secret_key", ""),
                s3.get("region", "us-east-1"),
                endpoint.netloc,
                endpoint.scheme == "https",
            ],
        )
    return connection


def attach_rest_catalog(connection: Any, settings: Settings, alias: str = "lake") -> str:
    """Attach the settings' Iceberg REST catalog as ``alias`` (its tables then read by name,
    ``<alias>.default.<table>``): OAuth2 client credentials or a bearer token as a DuckDB
    secret, never in the statement's text. Returns the alias."""
    kind = RestCatalogKind(settings)
    properties = kind.properties()
    if settings.iceberg_catalog_credential:
        client_id, _, secret = settings.iceberg_catalog_credential.partition(":")
        connection.execute(
            f"CREATE OR REPLACE SECRET {alias}_auth (TYPE iceberg, CLIENT_ID ?, CLIENT_SECRET ?, OAUTH2_SERVER_URI ?)",
            [client_id, secret, properties["oauth2-server-uri"]],
        )
    elif settings.iceberg_catalog_token:
        connection.execute(
            f"CREATE OR REPLACE SECRET {alias}_auth (TYPE iceberg, TOKEN ?)", [settings.iceberg_catalog_token]
        )
    auth = (
        f"SECRET {alias}_auth"
        if "credential" in properties or "token" in properties
        else "AUTHORIZATION_TYPE 'none'"
    )
    warehouse = properties.get("warehouse", "").replace("'", "''")
    endpoint = kind.uri.replace("'", "''")
    connection.execute(f"ATTACH '{warehouse}' AS {alias} (TYPE iceberg, ENDPOINT '{endpoint}', {auth})")
    return alias
