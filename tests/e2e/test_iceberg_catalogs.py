"""Iceberg tables in a REST catalog (Apache Iceberg's own REST catalog, run by ``tidemark-dev
services start iceberg-rest``, which checks OAuth2 client credentials), in-process with the
tests' Spark session (tests/e2e/test_iceberg_s3.py runs the jobs as processes on S3, once per
kind of catalog): the seal and a late amend, each killed at every commit point and retried;
snapshot expiry and the collector; the rows read by name by Spark, pyiceberg, DuckDB
(``ATTACH ... (TYPE iceberg, ENDPOINT ...)``) and Trino's REST catalog; a CDC snapshot merged
by Spark into the REST catalog, its labels read by tag. Then what a REST catalog adds: a
refused commit (409) planned again; a commit whose answer never came found in the table's
summaries, never committed twice; a wrong credential and a silent catalog each named in
bounded time, the secret masked."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.iceberg import (
    duckdb_rows,
    fresh_snapshot_ids,
    iceberg_table,
    pyiceberg_rows,
    snapshots_of,
    spark_rows,
)
from tests.helpers.iceberg_rest import CLIENT_ID, in_session, rest_catalog
from tests.helpers.orders import bootstrapped, duckdb_snapshot, snapshot, three_hours_of_changes, truth
from tests.helpers.tables import at, fresh_table
from tidemark.errors import IcebergCatalogAuthError, IcebergCatalogUnavailableError, InjectedFault
from tidemark.hourcommit.iceberg_java import JavaIceberg
from tidemark.iceberg_catalog import open_catalog
from tidemark.ingest.dump import run_dump
from tidemark.seal.maintenance import maintain
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.snapshot.merge import run_merge
from tidemark.table import Table
from tidemark_dev.generator import create_topic, produce, records, state_after
from tidemark_dev.iceberg_rest import IcebergRestService
from tidemark_dev.net import free_port
from tidemark_dev.trino import TrinoService

pytestmark = pytest.mark.e2e

HOUR = "2026-11-22T10"
ELEVEN = "2026-11-22T11"
TIMEOUT_S = 5.0  # the REST clients' bound on one call, short for the silences below


@pytest.fixture(scope="module")
def rest(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[IcebergRestService, Settings]]:
    with rest_catalog(settings, tmp_path_factory.mktemp("rest"), timeout_s=TIMEOUT_S) as pair:
        yield pair


def _kill_and_retry(spark: Any, config: Any, settings: Settings, run: str, points: tuple[str, ...]) -> Any:
    """The seal of ``run`` killed at each of ``points`` in turn, then run to its end."""
    for point in points:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TIDEMARK_FAIL_MODE", "raise")
            patch.setenv("TIDEMARK_FAIL_AT", point)
            with pytest.raises(InjectedFault):
                run_seal(spark, config, settings, run)
    return run_seal(spark, config, settings, run)


def test_an_iceberg_table_lands_amends_expires_and_every_engine_reads_it(
    rest: tuple[IcebergRestService, Settings], spark: Any, broker: str, tmp_path: Path
) -> None:
    """The SQL catalog's runs of each step are tests/integration/test_iceberg_tables.py's."""
    settings = rest[1]
    config, settings = iceberg_table(
        settings, tmp_path, broker, 2, late_policy="amend", output__version_retention="2s"
    )
    table, topic = config.table, config.source.topic
    produced = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)]))
    produced += produce(broker, topic, records([(0, at(11, 50)), (1, at(11, 45))], prefix="b"))
    run_dump(spark, config, settings, "run-1", at(12))
    sealed = _kill_and_retry(spark, config, settings, "run-1", ("mid_compaction", "after_registration"))
    assert HOUR in sealed.sealed

    produced += produce(broker, topic, records([(0, at(10, 30)), (1, at(10, 5))], prefix="late"))
    run_dump(spark, config, settings, "run-2", at(12, 30))
    amended = _kill_and_retry(spark, config, settings, "run-2", ("after_amend_files", "after_amend_moves"))
    assert amended.amended == [HOUR]

    ten = Table.open(config, settings).state.journal.state().hours[HOUR]
    assert (ten.version, ten.rows) == (2, 14)
    expected = {
        (p, o): json.loads(m.value or b"{}")["event_id"]
        for p, o, m in produced
        if b"T10:" in (m.value or b"")
    }
    assert pyiceberg_rows(settings, table, hour="10") == expected
    assert _commits(settings, table) == [(HOUR, "1"), (HOUR, "2")]  # once per version, whatever the kills
    assert duckdb_rows(settings, table, hour="10") == expected
    assert spark_rows(settings, table, hour="10") == expected

    # expiry: past output.version_retention, v1's snapshot goes, never the current one
    time.sleep(2.5)
    fresh = fresh_snapshot_ids(settings, table)  # the fresh branch's go too, but for its head
    expired = maintain(Table.open(config, settings), datetime(2100, 1, 1, tzinfo=UTC)).expired
    assert len(set(expired) - fresh) == 1
    assert [s["tidemark.version"] for s in snapshots_of(settings, table)] == ["2"]
    # the collector: v1's directory is in no snapshot now; one seal finds it so, the next one
    # after the retention (processing and wall-clock time) deletes it
    for run, hour in (("run-3", 12), ("run-4", 13)):
        produce(broker, topic, records([(0, at(hour, 30)), (1, at(hour, 40))], prefix=run))
        run_dump(spark, config, settings, run, at(hour + 2))
        collected = run_seal(spark, config, settings, run).versions_deleted
        time.sleep(2.5)
    assert any("/v0001-" in v for v in collected), collected
    assert pyiceberg_rows(settings, table, hour="10") == expected
    # Trino reads no SQLite catalog; REST by name: the complete read, and the fresh branch
    # (the hours sealed, and the open hour 15's batch beside them)
    complete, on_branch = _trino_rows(settings, table)
    assert complete == expected
    assert {k: v for k, v in on_branch.items() if k in complete} == complete
    assert {v for k, v in on_branch.items() if k not in complete} >= {"run-4-0", "run-4-1"}


def _trino_rows(
    settings: Settings, table: str
) -> tuple[dict[tuple[int, int], Any], dict[tuple[int, int], Any]]:
    """(hour 10 of the complete read, every row of the fresh branch) as Trino reads them."""
    trino = TrinoService(settings, free_port())
    trino.start()
    try:
        cursor = trino.connect().cursor()
        cursor.execute(f"SELECT _mq_partition, _mq_offset, event_id FROM {table} WHERE hr = '10'")
        complete = {(p, o): v for p, o, v in cursor.fetchall()}
        cursor.execute(f"SELECT _mq_partition, _mq_offset, event_id FROM {table} FOR VERSION AS OF 'fresh'")
        found = cursor.fetchall()
        assert len(found) == len({(p, o) for p, o, _ in found}), "a record read twice on the fresh branch"
        return complete, {(p, o): v for p, o, v in found}
    finally:
        trino.stop()


def test_a_rest_catalog_s_refusals_and_silences_are_retried_or_named(
    rest: tuple[IcebergRestService, Settings],
    spark: Any,
    broker: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    service, settings = rest
    config, settings = fresh_table(settings, tmp_path, output__table_format="iceberg")
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 1)
    produce(broker, topic, records([(0, at(10, m)) for m in (0, 20, 40)] + [(0, at(11, 30))]))
    run_dump(spark, config, settings, "run-1", at(12))

    # the table's creation refused (409, which Iceberg reports as "created concurrently"),
    # and no table there: created again, the hour committed once
    service.inject("commit-409")
    assert run_seal(spark, config, settings, "run-1").sealed == [HOUR]
    assert service.armed() == [] and _commits(settings, table) == [(HOUR, "1")]

    # the hour's commit refused as a lost race; then applied, its answer held past the client's
    # timeout: planned again, the seal finds its own commit there and commits nothing twice
    produce(broker, topic, records([(0, at(12, 50))], prefix="b"))
    run_dump(spark, config, settings, "run-2", at(13))
    service.inject("commit-409")
    service.inject("commit-stall", TIMEOUT_S + 4)
    with caplog.at_level(logging.WARNING, logger="tidemark.hourcommit.iceberg"):
        assert run_seal(spark, config, settings, "run-2").sealed == [ELEVEN]
    assert service.armed() == []
    assert (
        "lost a race with another writer" in caplog.text
        and "got no answer and may have landed" in caplog.text
    )
    assert _commits(settings, table) == [(HOUR, "1"), (ELEVEN, "1")]
    assert len(pyiceberg_rows(settings, table, hour="10")) == 3

    # a wrong credential: named within the clients' bound, the secret nowhere in the message
    bad = replace(settings, iceberg_catalog_credential=f"{CLIENT_ID}:not-the-secret")
    produce(broker, topic, records([(0, at(13, 50))], prefix="c"))
    run_dump(spark, config, bad, "run-3", at(14))  # the dump stages batches: no catalog call
    started = time.monotonic()
    for refused in (lambda: open_catalog(bad), lambda: JavaIceberg(bad, table).catalog):
        with pytest.raises(IcebergCatalogAuthError, match=r"refused tidemark's credential") as error:
            refused()
        assert "not-the-secret" not in str(error.value) and f"client '{CLIENT_ID}', secret ***" in str(
            error.value
        )
    with pytest.raises(IcebergCatalogAuthError):
        run_seal(spark, config, bad, "run-3")
    assert time.monotonic() - started < 3 * TIMEOUT_S

    # a catalog that takes the call and never answers (a socket that accepts, and says nothing;
    # a one-shot fault of the service could be taken by the refused seal's late warm-up thread):
    # named when the bound passes
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        mute = replace(settings, iceberg_catalog_uri=f"http://127.0.0.1:{silent.getsockname()[1]}")
        started = time.monotonic()
        with pytest.raises(IcebergCatalogUnavailableError, match=r"did not answer while opening the catalog"):
            open_catalog(mute)
        assert time.monotonic() - started < TIMEOUT_S + 3
    # with a credential it accepts and an answer, the retry seals hour 12
    assert run_seal(spark, config, settings, "run-3").sealed == ["2026-11-22T12"]
    assert len(_commits(settings, table)) == 3


def _commits(settings: Settings, table: str) -> list[tuple[str, str]]:
    return [(s["tidemark.hour"], s["tidemark.version"]) for s in snapshots_of(settings, table)]


def test_a_cdc_snapshot_in_a_rest_catalog_merges_and_is_read_by_its_tags(
    rest: tuple[IcebergRestService, Settings], spark: Any, broker: str, tmp_path: Path
) -> None:
    """Spark's MERGE and tags through the REST catalog: the snapshot by name and each label
    by its tag, equal to the source's state; pyiceberg and DuckDB read the same."""
    settings = rest[1]
    in_session(spark, settings)
    config, settings, source_state, _ = bootstrapped(spark, broker, settings, tmp_path, "iceberg")
    after = three_hours_of_changes(spark, broker, config, settings, source_state)
    for label in ("2026-11-22T10", "2026-11-22T11"):
        run_merge(spark, config, settings, f"merge-{label}", label)
    until_12 = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(12)], source_state
    )
    assert snapshot(spark, config, "2026-11-22T11", settings) == truth(until_12)
    assert duckdb_snapshot(settings, config) == truth(until_12)
