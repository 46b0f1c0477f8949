"""The Hive metastore service of the e2e tests, on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from tidemark.settings import Settings
from tidemark_dev.net import free_port
from tidemark_dev.postgres import MetastoreService


@contextmanager
def metastore_service(settings: Settings) -> Iterator[Settings]:
    """Run the service for ``settings`` (its warehouse decides s3a); yield settings whose jobs
    use it."""
    own = replace(settings, metastore_port=free_port())
    service = MetastoreService(own)
    service.start()
    try:
        yield replace(own, hive_metastore_uris=service.address())
    finally:
        service.stop()
