"""One connection to a Hive metastore service's Thrift API, without Spark's Hive client.

Two kinds of job talk to the service directly: the seal registering its hours
(``seal.thrift_metastore``) and every job keeping a Hive table's fresh read in step
(``fresh.hive_table``), the dump among them, which never starts a JVM. Both go through this
connection: opened on first use, opened again once if the service restarted in between, every
call named in its error (``pymetastore``'s generated client of the Hive metastore API).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from tidemark.errors import MetastoreServiceError

if TYPE_CHECKING:
    from tidemark.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")
DATABASE = "default"
# Spark conf settings that ask for a metastore only Hive's client speaks (SASL/Kerberos, TLS)
SECURED = (
    "spark.hadoop.hive.metastore.sasl.enabled",
    "spark.hadoop.hive.metastore.use.SSL",
)


def secured_settings(settings: Settings) -> list[str]:
    """The settings of ``SECURED`` that ``settings``' Spark conf turns on."""
    return [k for k in SECURED if settings.spark_conf.get(k, "").strip().lower() == "true"]


def thrift_uris(settings: Settings) -> str:
    """The metastore service a job may call over plain Thrift: its URIs, or "" where there
    is none (embedded Derby) or it is to be reached through Hive's client only."""
    if not settings.hive_metastore_uris or settings.metastore_client == "hive" or secured_settings(settings):
        return ""
    return settings.hive_metastore_uris


class MetastoreConnection:
    """Calls of one job over one Thrift connection, serialised (a Thrift client is not safe to
    share between threads, and warm-up threads open it). ``owner`` names the table in errors."""

    def __init__(self, uris: str, owner: str, *, timeout_s: float = 60.0) -> None:
        self.uris = [u.strip() for u in uris.split(",") if u.strip()]
        self.owner = owner
        self.timeout_s = timeout_s  # per call: a service that never answers fails by name
        self._lock = threading.RLock()
        self._transport: Any = None
        self._client: Any = None

    def connect(self) -> None:
        with self._lock:
            if self._client is None:
                self._open()

    def _open(self) -> None:
        from pymetastore.hive_metastore import ThriftHiveMetastore
        from thrift.protocol import TBinaryProtocol
        from thrift.transport import TSocket, TTransport

        failures = []
        for uri in self.uris:
            address = urlsplit(uri)
            socket = TSocket.TSocket(address.hostname or "127.0.0.1", address.port or 9083)
            socket.setTimeout(self.timeout_s * 1000)  # milliseconds: connect and every read
            transport = TTransport.TBufferedTransport(socket)
            try:
                transport.open()
            except TTransport.TTransportException as exc:
                failures.append(f"{uri}: {exc}")
                continue
            self._transport = transport
            self._client = ThriftHiveMetastore.Client(TBinaryProtocol.TBinaryProtocol(transport))
            return
        raise MetastoreServiceError(f"{self.owner}: no metastore service answered ({'; '.join(failures)})")

    def close(self) -> None:
        with self._lock:
            if self._transport is not None:
                self._transport.close()
            self._transport = self._client = None

    def call(self, what: str, call: Callable[[Any], T]) -> T:
        """One Thrift call; a dropped connection is opened again and the call made once more
        (callers make only idempotent calls: reads, adds if absent, a move to the same place)."""
        from thrift.Thrift import TException
        from thrift.transport.TTransport import TTransportException

        with self._lock:
            for attempt in (1, 2):
                if self._client is None:
                    self._open()
                try:
                    return call(self._client)
                except TTransportException as exc:
                    self.close()
                    if attempt == 2:
                        raise MetastoreServiceError(
                            f"{self.owner}: {what} failed: the connection to {self.uris} broke or "
                            f"gave no answer within {self.timeout_s:g} s, twice ({exc}); check the service "
                            "(TIDEMARK_METASTORE_TIMEOUT_S sets the wait); a metastore that wants "
                            "SASL/Kerberos or TLS is reached only through Hive's client: set "
                            "TIDEMARK_METASTORE_CLIENT=hive"
                        ) from exc
                    log.warning("%s: metastore connection lost during %s; reconnecting", self.owner, what)
                except TException as exc:
                    raise MetastoreServiceError(f"{self.owner}: {what} failed: {message(exc)}") from exc
        raise AssertionError("unreachable")

    def table(self, name: str) -> Any | None:
        """The table's definition, None where it does not exist."""
        from pymetastore.hive_metastore.ttypes import NoSuchObjectException

        def get(client: Any) -> Any | None:
            try:
                return client.get_table(DATABASE, name)
            except NoSuchObjectException:
                return None

        return self.call(f"reading table {DATABASE}.{name}", get)

    def partitions(self, name: str) -> list[Any]:
        """Every partition of the table, in one call."""
        return list(
            self.call(f"listing partitions of {name}", lambda c: c.get_partitions(DATABASE, name, -1))
        )


# how Hive reads each data file format: input format, output format, SerDe
HIVE_STORAGE = {
    "parquet": (
        "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
        "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
        "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
    ),
    "orc": (
        "org.apache.hadoop.hive.ql.io.orc.OrcInputFormat",
        "org.apache.hadoop.hive.ql.io.orc.OrcOutputFormat",
        "org.apache.hadoop.hive.ql.io.orc.OrcSerde",
    ),
}


def stored_as(partition: Any, file_format: str) -> Any:
    """``partition`` read as ``file_format`` (``parquet``, ``orc``): a partition's storage
    may differ from its table's (Hive and Trino read each partition by its own)."""
    inputs, outputs, serde = HIVE_STORAGE[file_format]
    partition.sd.inputFormat, partition.sd.outputFormat = inputs, outputs
    partition.sd.serdeInfo.serializationLib = serde
    return partition


def partition_at(shape: Any, values: list[str], location: str) -> Any:
    """A partition of ``shape`` (the table) with ``values`` at ``location``: the table's
    storage (columns, format, serde), as Hive and Spark make one."""
    from pymetastore.hive_metastore.ttypes import Partition

    storage = copy.deepcopy(shape.sd)
    storage.location = location
    return Partition(values=values, dbName=DATABASE, tableName=shape.tableName, sd=storage, parameters={})


def same_location(registered: str, wanted: str) -> bool:
    """The metastore qualifies what it stores (``s3a://b/x`` stays, ``/x`` becomes ``file:/x``)."""
    if registered.rstrip("/") == wanted.rstrip("/"):
        return True
    here = urlsplit(registered)
    return (
        not urlsplit(wanted).scheme and here.scheme == "file" and here.path.rstrip("/") == wanted.rstrip("/")
    )


def message(exc: Any) -> str:
    return str(getattr(exc, "message", None) or exc)
