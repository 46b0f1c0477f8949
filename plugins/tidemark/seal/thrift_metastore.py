"""The seal's registrations over a metastore service's Thrift API, without Spark's Hive client.

Spark's Hive client costs a job ~3.5 s before its first statement (Hive's classes in their own
class loader, the client's start) and ~1 s more for its first DDL; a seal that only adds or
moves an hour's partitions needs three Thrift calls of a few milliseconds each. So where the
warehouse has a metastore service (``TIDEMARK_HIVE_METASTORE_URIS``), the seal talks to it
directly (``pymetastore``'s generated client of the Hive metastore API) and keeps the Hive
client for what is rare: creating a table and evolving its columns, which need Spark's own
table properties, and dropping a session's cached listing of a table it read. With embedded
Derby there is no service to call: the session's Hive client stays (``HiveClientMetastore``).

The partition switch of an object store is the same protocol as the Hive client's: new values
first at an empty location, then every value of the hour in **one** ``alter_partitions`` call.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tidemark.config import TableConfig
from tidemark.config.columns import data_fields
from tidemark.errors import MetastoreServiceError
from tidemark.faults import crash_point
from tidemark.lazy_session import session_conf_value, without_pyspark
from tidemark.metastore_service import MetastoreConnection, partition_at, same_location, secured_settings
from tidemark.seal.metastore import DATABASE, PENDING, HiveClientMetastore, Metastore, emptied
from tidemark.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

T = TypeVar("T")
Key = tuple[tuple[str, str], ...]  # a partition's spec, sorted


def open_metastore(spark: SparkSession, config: TableConfig, settings: Settings) -> Metastore:
    """The table's registrations: over Thrift where a metastore service is configured, else
    through the session's Hive client (embedded Derby; or a service that wants SASL, Kerberos
    or TLS, which only Hive's client speaks: ``TIDEMARK_METASTORE_CLIENT=hive``, or the Hive
    settings that ask for them in the Spark conf)."""
    hive_client = HiveClientMetastore(spark, config)
    # the service the session's own catalog uses: a table it creates must be where its
    # partitions go (a session built from other settings keeps its own Hive client)
    uris = session_conf_value(spark, "spark.hadoop.hive.metastore.uris")
    if not uris or uris != settings.hive_metastore_uris or settings.metastore_client == "hive":
        return hive_client
    secured = secured_settings(settings)
    if secured:
        log.info("%s: registering through the Hive client (%s set)", config.table, ", ".join(secured))
        return hive_client
    log.info("%s: registering partitions over the metastore service's Thrift API (%s)", config.table, uris)
    return ThriftMetastore(uris, config, hive_client, timeout_s=settings.metastore_timeout_s)


class ThriftMetastore:
    """Registrations of one job over one Thrift connection (opened on first use, reopened once
    if the service restarted in between; calls are serialised: a Thrift client is not safe to
    share between threads, and the seal's warm-up thread opens it)."""

    def __init__(
        self, uris: str, config: TableConfig, hive_client: HiveClientMetastore, *, timeout_s: float = 60.0
    ) -> None:
        self.connection = MetastoreConnection(uris, config.table, timeout_s=timeout_s)
        self.uris = self.connection.uris
        self.config = config
        self.hive_client = hive_client  # creates and evolves tables, drops cached listings
        self._ensured: set[tuple[str, str]] = set()

    # -- the connection (``metastore_service``) -------------------------------------------
    @without_pyspark
    def connect(self) -> None:
        self.connection.connect()

    def close(self) -> None:
        self.connection.close()

    def _call(self, what: str, call: Callable[[Any], T]) -> T:
        return self.connection.call(what, call)

    def _table(self, table: str) -> Any | None:
        return self.connection.table(table)

    def ensure_table(self, table: str, location: Path | str) -> None:
        """An existing table whose columns are the config's needs nothing; a missing table or
        one to evolve goes through the Hive client (Spark's table properties), once per job."""
        if (table, str(location)) in self._ensured:
            return
        found = self._table(table)
        if found is None or not _same_columns(found, data_fields(self.config)):
            why = "missing" if found is None else f"columns {[(c.name, c.type) for c in found.sd.cols]}"
            log.info(
                "%s: %s.%s is %s: created or evolved through the Hive client",
                self.config.table,
                DATABASE,
                table,
                why,
            )
            self.hive_client.ensure_table(table, location)
        self._ensured.add((table, str(location)))

    def refresh(self, table: str) -> None:
        self.hive_client.refresh(table)

    # -- partitions -------------------------------------------------------------------------
    def add_partitions(self, table: str, partitions: Sequence[tuple[Mapping[str, str], Path | str]]) -> None:
        """Register partitions in one call (those registered already keep their location)."""
        from pymetastore.hive_metastore.ttypes import AddPartitionsRequest

        if not partitions:
            return
        shape = self._require_table(table)
        parts = [_partition(shape, spec, str(location)) for spec, location in partitions]
        request = AddPartitionsRequest(DATABASE, table, parts, ifNotExists=True, needResult=False)
        self._call(
            f"adding partitions {[dict(s) for s, _ in partitions]} to {table}",
            lambda c: c.add_partitions_req(request),
        )
        for spec, location in partitions:
            log.info("%s: registered partition %s at %s", table, dict(spec), location)

    def switch_partitions(
        self, table: str, hour_spec: Mapping[str, str], partitions: Sequence[tuple[Mapping[str, str], str]]
    ) -> None:
        """Point an hour's partitions at a new version's directories (``HiveClientMetastore``'s
        protocol: added values wait at an empty location, then one ``alter_partitions``, which
        also empties the values the version lacks before they are dropped)."""
        shape = self._require_table(table)
        wanted = {tuple(sorted(_lower(spec).items())): location for spec, location in partitions}
        current = self._hour_partitions(shape, hour_spec)
        added = [key for key in wanted if key not in current]
        if added:
            self.add_partitions(table, [(dict(key), f"{wanted[key]}/{PENDING}") for key in added])
            crash_point("mid_partition_switch")
            current.update(self._hour_partitions(shape, hour_spec))
        moved = []
        for key, part in current.items():
            new_location = wanted.get(key) or emptied(part.sd.location)  # a value the version lacks
            if same_location(part.sd.location, new_location):
                continue
            switched = copy.deepcopy(part)
            switched.sd.location = new_location
            moved.append(switched)
        if moved:
            self._call(
                f"moving partitions of hour {dict(hour_spec)} of {table}",
                lambda c: c.alter_partitions(DATABASE, table, moved),
            )
        gone = [current[key] for key in current if key not in wanted]
        if gone:
            crash_point("before_dropping_gone_values")  # emptied already: no old row shows
        for part in gone:
            self._drop(table, list(part.values))
        for spec, location in partitions:
            log.info("%s: registered partition %s at %s", table, dict(spec), location)
        if gone:
            log.info("%s: dropped partitions %s (not in the new version)", table, [p.values for p in gone])

    def _drop(self, table: str, values: list[str]) -> None:
        """Unregister one partition (its files stay, for the collector)."""
        self._call(
            f"dropping partition {values} of {table}",
            lambda c: c.drop_partition(DATABASE, table, values, False),
        )

    def partition_locations(self, table: str) -> list[str]:
        if self._table(table) is None:
            return []
        found = self._call(f"listing partitions of {table}", lambda c: c.get_partitions(DATABASE, table, -1))
        return [str(p.sd.location) for p in found]

    def partition_names(self, table: str) -> list[str]:
        if self._table(table) is None:
            return []
        return [
            str(name)
            for name in self._call(
                f"listing partition names of {table}", lambda c: c.get_partition_names(DATABASE, table, -1)
            )
        ]

    def drop_partitions(self, table: str, names: Sequence[str]) -> None:
        """Unregister partitions by name; their files stay. A name already gone is no error
        (a retried drop)."""
        from pymetastore.hive_metastore.ttypes import NoSuchObjectException

        for name in names:
            with contextlib.suppress(NoSuchObjectException):
                self._call(
                    f"dropping partition {name} of {table}",
                    lambda c, n=name: c.drop_partition_by_name(DATABASE, table, n, False),  # type: ignore[misc]
                )

    def _require_table(self, table: str) -> Any:
        found = self._table(table)
        if found is None:
            raise MetastoreServiceError(f"{DATABASE}.{table} does not exist: partitions cannot be registered")
        return found

    def _hour_partitions(self, shape: Any, hour_spec: Mapping[str, str]) -> dict[Key, Any]:
        """The table's partitions of one hour (the hour's columns lead the partition columns)."""
        keys = [k.name for k in shape.partitionKeys]
        prefix = [_lower(hour_spec)[k] for k in keys[: len(hour_spec)]]
        found = self._call(
            f"listing partitions {dict(hour_spec)} of {shape.tableName}",
            lambda c: c.get_partitions_ps(DATABASE, shape.tableName, prefix, -1),
        )
        return {tuple(sorted(zip(keys, p.values, strict=True))): p for p in found}


def _partition(shape: Any, spec: Mapping[str, str], location: str) -> Any:
    """A partition of ``shape`` (the table) at ``location``, by its spec."""
    return partition_at(shape, [_lower(spec)[k.name] for k in shape.partitionKeys], location)


def _lower(spec: Mapping[str, str]) -> dict[str, str]:
    """A partition spec by the metastore's column names (it keeps them in lower case)."""
    return {k.lower(): v for k, v in spec.items()}


def _same_columns(shape: Any, fields: Sequence[tuple[str, str]]) -> bool:
    """Whether the table's data columns are the config's (names and types, as Hive spells them)."""

    def norm(kind: str) -> str:
        return kind.replace(" ", "").lower()

    have = [(c.name.lower(), norm(c.type)) for c in shape.sd.cols]
    return have == [(name.lower(), norm(kind)) for name, kind in fields]
