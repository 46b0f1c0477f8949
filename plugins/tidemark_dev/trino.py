"""A one-node Trino (coordinator and worker) on 127.0.0.1: a reader of tidemark's tables in
the tests. Its ``iceberg`` catalog is tidemark's Iceberg catalog (PostgreSQL or REST); with a Hive metastore
service in the settings, its ``delta`` catalog (the Delta Lake connector) reads the Delta
snapshots registered there and its ``hive`` catalog (the Hive connector) the sealed hours of
a warehouse on S3.

It is jvm/pom.xml's ``trino`` profile (``make jvm``): the ``trino-server`` distribution,
unpacked once beside the cache with three of its plugins: the Iceberg connector (PostgreSQL's
JDBC driver inside), the Delta Lake connector and the Hive connector.
Trino's JDBC catalog speaks to PostgreSQL (not SQLite), so the Iceberg tables it reads are in
a PostgreSQL catalog (``TIDEMARK_ICEBERG_CATALOG_URI=postgresql+pg8000://...``) or a REST
catalog (``http://...``); its Delta
Lake connector needs the metastore as a Thrift service (``TIDEMARK_HIVE_METASTORE_URIS``), not
embedded Derby. Trino 476 needs Java 24 or later: ``TIDEMARK_TRINO_JAVA_HOME``, else the
newest JDK under /usr/lib/jvm that is one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tidemark.errors import ConfigError, ServiceError
from tidemark.iceberg_catalog import catalog_kind
from tidemark.jvm_jars import jvm_cache
from tidemark.settings import Settings
from tidemark.tablefs import is_object_store, s3_from_environment
from tidemark_dev.services import Service, java_home_at_least

log = logging.getLogger(__name__)

TRINO_JAVA = 24  # the oldest Java a Trino 476 server starts on
DELTA_CATALOG = "delta"  # Trino's catalog of the Delta tables in the metastore
HIVE_CATALOG = "hive"  # Trino's catalog of the Hive tables (the sealed hours) in the metastore


def trino_java_home() -> Path:
    """A JDK Trino starts on: ``TIDEMARK_TRINO_JAVA_HOME``, else the newest of /usr/lib/jvm."""
    return java_home_at_least(TRINO_JAVA, "trino", "TIDEMARK_TRINO_JAVA_HOME")


PLUGINS = ("iceberg", "delta-lake", "hive")  # of the distribution's plugin/ directories, the ones unpacked


def trino_home() -> Path:
    """The server unpacked from the ``trino`` profile's distribution (once) with ``PLUGINS``
    only (the rest is most of its size); unpacked again when ``PLUGINS`` changed."""
    source = jvm_cache() / "trino"
    archives = sorted(source.glob("trino-server-*.tar.gz")) if (source / ".complete").is_file() else []
    if not archives:
        raise ServiceError(f"trino: the 'trino' JVM artifacts are not in {jvm_cache()}: run `make jvm`")
    version = archives[0].name.removeprefix("trino-server-").removesuffix(".tar.gz")
    home = jvm_cache() / f"trino-server-{version}"
    stamp = home / ".unpacked"
    if stamp.is_file() and stamp.read_text() == ",".join(PLUGINS):
        return home
    partial = home.with_name(f"{home.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)  # an unpacking that was killed
    with tarfile.open(archives[0]) as archive:
        archive.extractall(partial, members=_wanted(archive), filter="tar")
    (server,) = partial.iterdir()
    missing = [p for p in PLUGINS if not (server / "plugin" / p).is_dir()]
    if missing:
        raise ServiceError(f"trino: {archives[0].name} holds no plugin {', '.join(missing)}")
    shutil.rmtree(home, ignore_errors=True)  # one unpacked with other plugins
    server.rename(home)
    stamp.write_text(",".join(PLUGINS))
    partial.rmdir()
    return home


def _wanted(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The distribution's members but the plugins not in ``PLUGINS``."""
    for member in archive:
        parts = member.name.split("/")
        if len(parts) > 2 and parts[1] == "plugin" and parts[2] not in PLUGINS:
            continue
        yield member


class TrinoService(Service):
    """``launcher run`` of the unpacked server, its configuration under ``$TIDEMARK_HOME/trino``."""

    name = "trino"
    start_timeout = 240.0  # some 35 s on two cores

    def __init__(self, settings: Settings, port: int) -> None:
        super().__init__(settings)
        self.port = port
        self.etc = settings.home / "trino" / "etc"

    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def answers(self) -> bool:
        return self._active()

    def _active(self) -> bool:
        """Past its start-up: the coordinator answers before it accepts queries
        (SERVER_STARTING_UP until ``/v1/info`` says it is no longer starting)."""
        try:
            with urllib.request.urlopen(f"http://{self.address()}/v1/info", timeout=3) as response:
                if json.loads(response.read()).get("starting") is not False:
                    return False
        except (OSError, ValueError):
            return False
        return self._schedules()

    def _schedules(self) -> bool:
        """A query runs: the coordinator's own worker has announced itself (NO_NODES_AVAILABLE
        for a second or two after it says it started)."""
        import trino

        try:
            cursor = trino.dbapi.connect(host="127.0.0.1", port=self.port, user="tidemark").cursor()
            cursor.execute("SELECT 1")
            return bool(cursor.fetchall())
        except (trino.exceptions.TrinoQueryError, trino.exceptions.HttpError, OSError):
            return False

    def environment(self) -> dict[str, str]:
        java = trino_java_home()
        catalog = self.settings.iceberg_environment()  # a REST catalog's secret: ${ENV:...} in its file
        return {
            **os.environ,
            **catalog,
            "JAVA_HOME": str(java),
            "PATH": f"{java / 'bin'}:{os.environ['PATH']}",
        }

    def command(self) -> list[str]:
        home = trino_home()
        data = self.settings.home / "trino" / "data"
        return [str(home / "bin" / "launcher"), "run", f"--etc-dir={self.etc}", f"--data-dir={data}"]

    def prepare(self) -> None:
        (self.etc / "catalog").mkdir(parents=True, exist_ok=True)
        node = {
            "node.environment": "tidemark",
            "node.id": "tidemark",
            "node.bind-ip": "127.0.0.1",
            "node.internal-address": "127.0.0.1",
            "node.data-dir": str(self.settings.home / "trino" / "data"),
        }
        server = {
            "coordinator": "true",
            "node-scheduler.include-coordinator": "true",
            "http-server.http.port": str(self.port),
            "discovery.uri": f"http://127.0.0.1:{self.port}",
            "query.max-memory": "512MB",
        }
        _write(self.etc / "node.properties", node)
        _write(self.etc / "config.properties", server)
        (self.etc / "jvm.config").write_text(
            "-server\n-Xmx1G\n-XX:+UseG1GC\n-Djdk.attach.allowAttachSelf=true\n-Duser.timezone=UTC\n"
        )
        if urlsplit(self.settings.iceberg_catalog_url).scheme.startswith(("postgres", "http")):
            _write(
                self.etc / "catalog" / f"{self.settings.iceberg_catalog}.properties",
                iceberg_catalog(self.settings),
            )
        if self.settings.hive_metastore_uris:
            _write(self.etc / "catalog" / f"{DELTA_CATALOG}.properties", delta_catalog(self.settings))
            _write(self.etc / "catalog" / f"{HIVE_CATALOG}.properties", hive_catalog(self.settings))

    def connect(self, catalog: str | None = None) -> Any:
        """A DB-API connection (Trino's Python client) to ``catalog``'s ``default`` (the
        Iceberg catalog unless named)."""
        import trino

        return trino.dbapi.connect(
            host="127.0.0.1",
            port=self.port,
            user="tidemark",
            catalog=catalog or self.settings.iceberg_catalog,
            schema="default",
        )


def iceberg_catalog(settings: Settings) -> dict[str, str]:
    """Trino's Iceberg connector on tidemark's catalog (a PostgreSQL SQL catalog or a REST
    catalog: ``CatalogKind.trino_properties``), its files readable: local ones, or on S3 from
    the ``AWS_*`` environment."""
    try:
        catalog = catalog_kind(settings).trino_properties()
    except ConfigError as exc:
        raise ServiceError(f"trino: {exc}") from exc
    if is_object_store(settings.warehouse):
        return {**catalog, **_native_s3()}
    return {**catalog, "fs.native-local.enabled": "true", "local.location": "/"}


def delta_catalog(settings: Settings) -> dict[str, str]:
    """Trino's Delta Lake connector on the Hive metastore service, where tidemark registers a
    Delta snapshot as a Delta table (``tidemark.snapshot.delta_catalog``), local files readable."""
    return {
        "connector.name": "delta_lake",
        "hive.metastore.uri": settings.hive_metastore_uris,
        "fs.native-local.enabled": "true",
        "local.location": "/",
    }


def hive_catalog(settings: Settings) -> dict[str, str]:
    """Trino's Hive connector on the Hive metastore service, where the seal registers each
    hour: timestamps at microseconds (its default reads milliseconds), Parquet's INT96 and ORC's
    in UTC as written; on S3 its native client with the ``AWS_*`` environment. Local hours
    it cannot read: its local file system serves ``local://`` only, and a ``file:`` location
    reads as empty, without an error (measured with 476)."""
    catalog = {
        "connector.name": "hive",
        "hive.metastore.uri": settings.hive_metastore_uris,
        "hive.timestamp-precision": "MICROSECONDS",
        "hive.parquet.time-zone": "UTC",
        "hive.orc.time-zone": "UTC",
    }
    return {**catalog, **_native_s3()} if is_object_store(settings.warehouse) else catalog


def _native_s3() -> dict[str, str]:
    """Trino's native S3 file system from the ``AWS_*`` environment (s3a:// locations too)."""
    s3 = s3_from_environment()
    conf = {"fs.native-s3.enabled": "true", "s3.region": s3.get("region", "us-east-1")}
    if s3.get("endpoint"):
        conf.update({"s3.endpoint": s3["endpoint"], "s3.path-style-access": "true"})
    if s3.get("access_key"):
        conf.update({"s3.aws-access-key": s3["access_key"], "s3.aws-secret-key": s3.get("secret_key", "")})
    return conf


def _write(path: Path, properties: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
