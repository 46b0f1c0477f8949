"""Iceberg's REST catalog service for the tests (tidemark_dev/iceberg_rest.py), on its own port
and home, with OAuth2 client credentials it checks; the settings that reach it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from tidemark.iceberg_catalog import spark_catalog_conf
from tidemark.settings import Settings
from tidemark_dev.iceberg_rest import IcebergRestService
from tidemark_dev.net import free_port

CLIENT_ID = "tidemark-tests"
# a name of its own beside the session's SQL catalog ("iceberg"): the tests' shared Spark session
# loads each catalog once, so the REST one is another catalog of it (``in_session``)
CATALOG = "rest"


def in_session(spark: Any, settings: Settings) -> None:
    """Make the settings' REST catalog a catalog of the running Spark session (its
    ``spark.sql.catalog.<name>.*`` conf is read when the catalog is first used)."""
    prefix = f"spark.sql.catalog.{settings.iceberg_catalog}"
    for key, value in spark_catalog_conf(settings).items():
        if key.startswith(prefix):
            spark.conf.set(key, value)


@contextmanager
def rest_catalog(
    settings: Settings, home: Path, *, timeout_s: float = 60.0
) -> Iterator[tuple[IcebergRestService, Settings]]:
    """The service started in ``home`` and ``settings`` that reach it (every tidemark client of
    the test uses them); stopped after."""
    port = free_port()
    own = replace(
        settings,
        iceberg_rest_port=port,
        iceberg_catalog_uri=f"http://127.0.0.1:{port}",
        iceberg_catalog_credential=f"{CLIENT_ID}:{secrets.token_hex(12)}",
        iceberg_catalog_timeout_s=timeout_s,
        iceberg_catalog=CATALOG,
    )
    service = IcebergRestService(replace(own, home=home))
    service.start()
    try:
        yield service, own
    finally:
        service.stop()
