"""DuckDB as a reader of tidemark's Iceberg tables, with its ``iceberg`` and ``avro``
extensions loaded from their PyPI wheels (``duckdb-extension-*``, pinned with duckdb): no
download from extensions.duckdb.org, which a machine without internet cannot reach."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def duckdb_connection() -> Any:
    """An in-memory DuckDB that reads Iceberg tables (``iceberg_scan(<metadata file>)``)."""
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    connection = duckdb.connect()
    for module in (duckdb_extension_avro, duckdb_extension_iceberg):
        (path,) = Path(module.__file__ or "").parent.rglob("*.duckdb_extension")
        connection.sql(f"LOAD '{path}'")
    return connection
