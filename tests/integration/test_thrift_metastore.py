"""The seal's registrations over the metastore service's Thrift API (the real Hive 2.3 Thrift
metastore on PostgreSQL), without Spark's Hive client: an existing table is taken as it is,
partitions are added once, an hour's values switch together in one call, a kill in the middle
of a switch leaves readers on the old version and its retry finishes it, a restarted service
is reconnected to, and a missing table or a refused call is a named error."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.metastore import hive_made_table, metastore_service
from tests.helpers.tables import fresh_table
from tidemark.errors import InjectedFault, MetastoreServiceError
from tidemark.seal.metastore import DATABASE, PENDING, HiveClientMetastore
from tidemark.seal.thrift_metastore import ThriftMetastore, open_metastore
from tidemark.settings import Settings
from tidemark_dev.net import free_port
from tidemark_dev.postgres import MetastoreService

pytestmark = pytest.mark.integration

HOUR = {"dt": "2026-11-22", "hr": "10"}


@pytest.fixture(scope="module")
def service(settings: Settings, postgres: str) -> Iterator[Settings]:
    with metastore_service(settings) as own:
        yield own


def _located(metastore: ThriftMetastore, table: str) -> dict[str, str]:
    """Partition name -> where it points, as the service answers."""
    found = metastore._call("listing", lambda c: c.get_partitions(DATABASE, table, -1))
    return {
        "/".join(f"{k}={v}" for k, v in zip(("dt", "hr", "app"), p.values, strict=False)): p.sd.location
        for p in found
    }


def test_the_seal_registers_over_thrift_and_switches_an_hours_values_together(
    spark: Any, service: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, own = fresh_table(service, tmp_path, partitioning__columns=["app"])
    table = config.table
    # the test's session keeps its embedded Derby: its jobs would take the service's Thrift API
    # (tests/e2e/test_metastore_service.py), here the Thrift side is built directly
    metastore = ThriftMetastore(own.hive_metastore_uris, config, HiveClientMetastore(spark, config))
    hive_made_table(metastore.connection, metastore.config, table, f"file:{tmp_path}/table")
    metastore.ensure_table(table, tmp_path / "table")  # the columns are the config's: nothing to do
    # ... and nothing went to the session's Hive client (embedded Derby here: a table would appear)
    assert not spark.catalog.tableExists(table)

    def version(name: str, apps: list[str], spec: dict[str, str] = HOUR) -> list[tuple[dict[str, str], str]]:
        return [({**spec, "app": a}, f"file:{tmp_path}/{name}/app={a}") for a in apps]

    other = {"dt": "2026-11-22", "hr": "11"}
    metastore.add_partitions(table, version("h11", ["web"], other))
    metastore.add_partitions(table, version("h11-again", ["web"], other))  # registered: it stays
    hour_11 = "dt=2026-11-22/hr=11/app=web"
    assert _located(metastore, table) == {hour_11: f"file:{tmp_path}/h11/app=web"}

    metastore.switch_partitions(table, HOUR, version("v1", ["web", "ios"]))
    v1 = _located(metastore, table)
    assert v1["dt=2026-11-22/hr=10/app=ios"] == f"file:{tmp_path}/v1/app=ios"

    # v2 keeps web, brings android, drops ios; killed after adding android at its empty place
    monkeypatch.setenv("TIDEMARK_FAIL_AT", "mid_partition_switch")
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    with pytest.raises(InjectedFault):
        metastore.switch_partitions(table, HOUR, version("v2", ["web", "android"]))
    killed = _located(metastore, table)
    assert killed["dt=2026-11-22/hr=10/app=web"] == v1["dt=2026-11-22/hr=10/app=web"]  # not moved yet
    assert killed["dt=2026-11-22/hr=10/app=android"] == f"file:{tmp_path}/v2/app=android/{PENDING}"
    # killed again after the one move: ios (gone from v2) points where no file is, never at v1
    monkeypatch.setenv("TIDEMARK_FAIL_AT", "before_dropping_gone_values")
    with pytest.raises(InjectedFault):
        metastore.switch_partitions(table, HOUR, version("v2", ["web", "android"]))
    emptied = _located(metastore, table)
    assert emptied["dt=2026-11-22/hr=10/app=ios"] == f"file:{tmp_path}/v1/app=ios/{PENDING}"
    assert emptied["dt=2026-11-22/hr=10/app=web"] == f"file:{tmp_path}/v2/app=web"
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    metastore.switch_partitions(table, HOUR, version("v2", ["web", "android"]))
    after = _located(metastore, table)
    assert after == {
        hour_11: f"file:{tmp_path}/h11/app=web",
        "dt=2026-11-22/hr=10/app=web": f"file:{tmp_path}/v2/app=web",
        "dt=2026-11-22/hr=10/app=android": f"file:{tmp_path}/v2/app=android",
    }
    metastore.switch_partitions(table, HOUR, version("v2", ["web", "android"]))  # a retry: no change
    assert _located(metastore, table) == after
    assert sorted(metastore.partition_locations(table)) == sorted(after.values())
    assert sorted(metastore.partition_names(table)) == sorted(after)

    # the service restarts between two calls of the same job: the next call reconnects
    restarted = MetastoreService(own)
    restarted.stop()
    restarted.start()
    metastore.switch_partitions(table, HOUR, version("v3", ["web"]))
    assert _located(metastore, table)["dt=2026-11-22/hr=10/app=web"] == f"file:{tmp_path}/v3/app=web"

    with pytest.raises(MetastoreServiceError, match=rf"{DATABASE}\.{table}_missing does not exist"):
        metastore.add_partitions(f"{table}_missing", version("v1", ["web"]))
    metastore.close()


def test_a_table_to_create_or_evolve_goes_through_the_hive_client(
    spark: Any, service: Settings, tmp_path: Path
) -> None:
    """Creating a table and evolving its columns need Spark's table properties: the Hive client
    does them (here the session's embedded Derby, where the table then appears)."""
    config, own = fresh_table(service, tmp_path)
    metastore = ThriftMetastore(own.hive_metastore_uris, config, HiveClientMetastore(spark, config))
    metastore.ensure_table(config.table, tmp_path / "table")
    assert spark.catalog.tableExists(config.table)
    # embedded Derby, a session whose catalog is not the service (this one: its Derby), a
    # service asked to be reached through Hive's client, or one that wants SASL
    for other in (
        replace(own, hive_metastore_uris=""),
        own,
        replace(own, metastore_client="hive"),
        replace(own, spark_conf={"spark.hadoop.hive.metastore.sasl.enabled": "true"}),
    ):
        assert isinstance(open_metastore(spark, config, other), HiveClientMetastore)


def test_no_service_answering_is_a_named_error(spark: Any, settings: Settings, tmp_path: Path) -> None:
    config, _ = fresh_table(settings, tmp_path)
    nobody = f"thrift://127.0.0.1:{free_port()}"
    metastore = ThriftMetastore(nobody, config, HiveClientMetastore(spark, config))
    with pytest.raises(MetastoreServiceError, match=rf"{config.table}: no metastore service answered"):
        metastore.connect()


def test_a_service_that_hangs_up_on_plain_thrift_names_the_hive_client_setting(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    """A Kerberos (SASL) or TLS metastore drops a plain Thrift client's connection: after the one
    reconnect the error says which setting reaches it through Hive's client."""
    config, _ = fresh_table(settings, tmp_path)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def hang_up() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connection.recv(1024)
            connection.close()

    server = threading.Thread(target=hang_up, daemon=True)
    server.start()
    try:
        uri = f"thrift://127.0.0.1:{listener.getsockname()[1]}"
        metastore = ThriftMetastore(uri, config, HiveClientMetastore(spark, config))
        with pytest.raises(MetastoreServiceError, match="TIDEMARK_METASTORE_CLIENT=hive") as refused:
            metastore.partition_locations(config.table)
        assert config.table in str(refused.value) and "twice" in str(refused.value)
    finally:
        stop.set()
        server.join(5)
        listener.close()
