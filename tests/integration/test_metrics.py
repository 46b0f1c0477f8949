"""Metrics through Airflow's real StatsD backend to a UDP listener: totals, the last batch,
quarantined hours and per-hour gauges, each hour sent once."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import AMOUNT_AT_MOST_100, at, fresh_table
from tidemark.errors import QualityGateError
from tidemark.ingest.dump import run_dump
from tidemark.observe.metrics import emit_metrics
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration


@pytest.fixture
def statsd_listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A UDP socket as the StatsD server, and Airflow's stats initialised as a task runner does."""
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics.stats_utils import get_stats_factory

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(sock.getsockname()[1]))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    stats.initialize(factory=get_stats_factory(), export_legacy_names=False)
    try:
        yield sock
    finally:
        from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

        stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
        sock.close()


def received(sock: socket.socket, count: int) -> dict[str, float]:
    """name -> value of ``count`` StatsD gauge lines (``airflow.<name>:<value>|g``)."""
    out: dict[str, float] = {}
    seen = 0
    while seen < count:
        for line in sock.recv(65536).decode().splitlines():
            name, rest = line.split(":", 1)
            value, kind = rest.split("|")[:2]
            assert kind == "g", line
            out[name.removeprefix("airflow.")] = float(value)
            seen += 1
    return out


def test_gauges_reach_statsd_and_hours_are_sent_once(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, statsd_listener: socket.socket
) -> None:
    config, settings = fresh_table(settings, tmp_path, quality__expectations=AMOUNT_AT_MOST_100)
    create_topic(broker, config.source.topic, 1)
    produce(
        broker,
        config.source.topic,
        records(
            [
                (0, at(10, 5)),
                (0, at(10, 6), {"amount": "500.00"}),  # hour 10: quarantined
                (0, at(11, 5)),
                (0, at(11, 6)),
                (0, at(11, 7)),  # hour 11: sealed
                (0, at(12, 30)),
            ]
        ),
    )
    run_dump(spark, config, settings, "run-1", at(12, 40))
    with pytest.raises(QualityGateError):
        run_seal(spark, config, settings, "run-1")

    sent = emit_metrics(config, settings)
    t = f"tidemark.{config.table}."
    got = received(statsd_listener, len(sent))
    assert got == sent
    assert got[t + "rows"] == 6 and got[t + "batches"] == 1 and got[t + "batch.read"] == 6
    assert got[t + "hours_quarantined"] == 1
    assert got[t + "ready_lag_seconds"] == 20 * 60  # processing 12:40 - ready (12:30 - 10m tolerance)
    assert got[t + "hour.rows"] == 3 and got[t + "hour.quality_failures"] == 0  # hour 11 only

    again = emit_metrics(config, settings)  # the next run: no hour gauges twice
    assert not any(name.startswith(t + "hour.") for name in again)
    received(statsd_listener, len(again))
