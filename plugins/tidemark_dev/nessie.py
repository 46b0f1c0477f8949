"""Project Nessie (0.99, from Maven Central) as a second Iceberg REST catalog for the tests: a
maintained server tidemark did not write, whose Iceberg REST API (``/iceberg``) manages the
tables' metadata itself on an object store. jvm/pom.xml's ``nessie`` profile (``make jvm``):
one runnable Quarkus jar, on Java 21 or later (``TIDEMARK_NESSIE_JAVA_HOME``, else the newest
JDK under /usr/lib/jvm), its versions in memory, listening on 127.0.0.1 only.

Its warehouse is the settings' S3 warehouse; the S3 endpoint and keys come from the ``AWS_*``
environment, the keys handed over as Quarkus secrets in its environment, never on its
command line. Without authentication (Nessie's default): the REST clients send no credential.
"""

from __future__ import annotations

import os
import urllib.request

from tidemark.errors import ServiceError
from tidemark.jvm_jars import require_jars
from tidemark.settings import Settings
from tidemark.tablefs import is_object_store, s3_from_environment
from tidemark_dev.services import Service, java_home_at_least

NESSIE_JAVA = 21


class NessieService(Service):
    """Nessie's server on ``port`` (its management interface on the next one)."""

    name = "nessie"
    start_timeout = 90.0

    def __init__(self, settings: Settings, port: int) -> None:
        super().__init__(settings)
        self.port = port
        if not is_object_store(settings.warehouse):
            raise ServiceError("nessie: its Iceberg REST catalog needs an object store warehouse (s3://...)")

    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def catalog_uri(self) -> str:
        """What ``TIDEMARK_ICEBERG_CATALOG_URI`` names: its Iceberg REST API."""
        return f"{self.address()}/iceberg"

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.catalog_uri}/v1/config", timeout=3) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def environment(self) -> dict[str, str]:
        """The S3 keys as the Quarkus secret its config names (``tidemarks3.name``/``.secret``)."""
        s3 = s3_from_environment()
        return {
            **os.environ,
            "TIDEMARKS3_NAME": s3.get("access_key", ""),
            "TIDEMARKS3_SECRET": s3.get("secret_key", ""),
        }

    def command(self) -> list[str]:
        s3 = s3_from_environment()
        warehouse = "s3://" + self.settings.warehouse.split("://", 1)[1]
        options = {
            "quarkus.http.host": "127.0.0.1",
            "quarkus.http.port": self.port,
            "quarkus.management.host": "127.0.0.1",
            "quarkus.management.port": self.port + 1,
            "nessie.version.store.type": "IN_MEMORY",
            "quarkus.http.access-log.enabled": "true",  # each request in its log
            "nessie.catalog.default-warehouse": "warehouse",
            "nessie.catalog.warehouses.warehouse.location": warehouse,
            "nessie.catalog.service.s3.default-options.endpoint": s3.get("endpoint", ""),
            "nessie.catalog.service.s3.default-options.path-style-access": "true",
            # the clients sign their own requests with the AWS_* keys: Nessie 0.99's signing
            # endpoint is not where Iceberg 1.12's client posts (404 on .../sign)
            "nessie.catalog.service.s3.default-options.request-signing-enabled": "false",
            "nessie.catalog.service.s3.default-options.region": s3.get("region", "us-east-1"),
            "nessie.catalog.service.s3.default-options.access-key": "urn:nessie-secret:quarkus:tidemarks3",
        }
        java = java_home_at_least(NESSIE_JAVA, self.name, "TIDEMARK_NESSIE_JAVA_HOME") / "bin" / "java"
        (jar,) = require_jars("nessie")
        return [str(java), "-Xmx512m", *(f"-D{k}={v}" for k, v in options.items()), "-jar", jar]
