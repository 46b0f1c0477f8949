"""A local Iceberg REST catalog for development and tests: Apache Iceberg's own REST catalog
(``RESTCatalogAdapter`` and ``RESTCatalogServlet`` from Maven Central, a JDBC catalog on
SQLite behind them) run by tidemark's launcher (jvm/restcatalog, compiled by ``make jvm``),
which listens on 127.0.0.1 only and checks credentials as production catalogs do.

``tidemark-dev services start iceberg-rest`` runs it on ``TIDEMARK_ICEBERG_REST_PORT``; point
tidemark at it with ``TIDEMARK_ICEBERG_CATALOG_URI=http://127.0.0.1:<port>``. With
``TIDEMARK_ICEBERG_CATALOG_CREDENTIAL=<id>:<secret>`` (or ``..._TOKEN``) in its environment it
accepts exactly that credential (OAuth2 client credentials at ``/v1/oauth/tokens``) or token,
and refuses every other request with 401. Its test faults (``inject``): the next commit
refused with 409, or applied and its answer held.

On an S3 warehouse the catalog writes metadata files through s3a (jvm/pom.xml's ``s3a``
profile), its endpoint in a ``core-site.xml`` and its keys from the ``AWS_*`` environment.
"""

from __future__ import annotations

import os
import secrets
import urllib.error
import urllib.request
from pathlib import Path
from xml.sax.saxutils import escape

from tidemark.jvm_jars import require_jars
from tidemark.spark import s3a_jars
from tidemark.tablefs import hadoop_uri, is_object_store
from tidemark_dev.s3 import hadoop_s3a_site
from tidemark_dev.services import Service, java_binary

FAULTS = ("commit-409", "commit-stall")


class IcebergRestService(Service):
    """Iceberg's REST catalog on 127.0.0.1 (see the module)."""

    name = "iceberg-rest"
    start_timeout = 60.0

    def address(self) -> str:
        return f"http://127.0.0.1:{self.settings.iceberg_rest_port}"

    @property
    def base_dir(self) -> Path:
        return self.settings.home / "iceberg-rest"

    @property
    def faults_dir(self) -> Path:
        return self.base_dir / "faults"

    def prepare(self) -> None:
        self.faults_dir.mkdir(parents=True, exist_ok=True)
        client_id = self.settings.iceberg_catalog_credential.partition(":")[0]
        properties = {
            "host": "127.0.0.1",
            "port": str(self.settings.iceberg_rest_port),
            "auth.client-id": client_id,
            "faults.dir": str(self.faults_dir),
            "catalog.uri": f"jdbc:sqlite:{self.base_dir / 'catalog.db'}",
            "catalog.jdbc.schema-version": "V1",
            "catalog.warehouse": hadoop_uri(self.settings.warehouse),
        }
        (self.base_dir / "conf.properties").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        conf_dir = self.base_dir / "conf"
        conf_dir.mkdir(exist_ok=True)
        site = hadoop_s3a_site(self.settings)
        (conf_dir / "core-site.xml").write_text(
            "<configuration>\n"
            + "".join(
                f"<property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                for k, v in site.items()
            )
            + "</configuration>\n"
        )

    def environment(self) -> dict[str, str]:
        """The secrets it accepts, from the settings (never in its files)."""
        settings = self.settings
        secret = settings.iceberg_catalog_credential.partition(":")[2]
        token = settings.iceberg_catalog_token or (secrets.token_hex(16) if secret else "")
        return {**os.environ, "TIDEMARK_REST_CLIENT_SECRET": secret, "TIDEMARK_REST_TOKEN": token}

    def command(self) -> list[str]:
        # s3a first: iceberg-core's tests jar carries a stand-in S3ABlockOutputStream of its own
        s3a = s3a_jars(self.settings) if is_object_store(self.settings.warehouse) else []
        jars = [*s3a, *require_jars("iceberg-rest"), *require_jars("iceberg-rest-server")]
        class_path = ":".join([str(self.base_dir / "conf"), *jars])
        return [
            java_binary(self.name),
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            class_path,
            "io.tidemark.rest.LocalRestCatalog",
            str(self.base_dir / "conf.properties"),
        ]

    def answers(self) -> bool:
        """Its config endpoint answers (401 without a token counts: it is up)."""
        try:
            with urllib.request.urlopen(f"{self.address()}/v1/config", timeout=3) as response:
                return bool(response.status == 200)
        except urllib.error.HTTPError as refused:
            return refused.code == 401
        except OSError:
            return False

    def inject(self, fault: str, seconds: float = 0.0) -> None:
        """Arm one fault for the next matching request (one-shot; see the module)."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; expected one of {', '.join(FAULTS)}")
        self.faults_dir.mkdir(parents=True, exist_ok=True)
        aside = self.faults_dir / f".{fault}.tmp"
        aside.write_text(f"{seconds:g}")
        aside.replace(self.faults_dir / fault)

    def armed(self) -> list[str]:
        """Faults not taken yet."""
        return sorted(p.name for p in self.faults_dir.glob("*") if p.name in FAULTS)
