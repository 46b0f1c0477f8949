"""The quality gate in the seal job: Great Expectations on the hour's rows in real Spark,
block (quarantine + release) and warn policies, against the real metastore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import AMOUNT_AT_MOST_100, at, fresh_table, registered
from tidemark.errors import QualityGateError, ReleaseError
from tidemark.ingest.dump import run_dump
from tidemark.observe.status import explain_hour, render_hour
from tidemark.seal.data_docs import render_pending
from tidemark.seal.sealing import run_release, run_seal
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration


def bad_hour_10(broker: str, topic: str) -> None:
    """Hour 10: a duplicate event id and an amount of 500; hour 11 clean; hour 12 moves time."""
    produce(
        broker,
        topic,
        records(
            [
                (0, at(10, 5), {"event_id": "dup"}),
                (0, at(10, 6), {"event_id": "dup"}),
                (0, at(10, 7), {"amount": "500.00"}),
                (0, at(11, 10)),
                (0, at(11, 20)),
                (0, at(12, 30)),
            ]
        ),
    )


def test_block_quarantines_the_hour_later_hours_go_on_and_release_registers_it_once(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, quality__expectations=AMOUNT_AT_MOST_100)
    create_topic(broker, config.source.topic, 1)
    bad_hour_10(broker, config.source.topic)
    run_dump(spark, config, settings, "run-1", at(12, 40))
    with pytest.raises(QualityGateError) as failed:
        run_seal(spark, config, settings, "run-1")
    assert set(failed.value.failures) == {"2026-11-22T10"}
    lines = " ".join(failed.value.failures["2026-11-22T10"])
    assert "expect_column_values_to_be_unique(event_id)" in lines and "'dup'" in lines
    assert "expect_column_values_to_be_between(amount)" in lines and "500" in lines
    assert "tidemark release --table" in str(failed.value)
    assert registered(spark, config.table) == ["dt=2026-11-22/hr=11"]  # the pipeline went on

    with pytest.raises(QualityGateError):  # a retry of the same run stays red
        run_seal(spark, config, settings, "run-1")
    later = run_seal(spark, config, settings, "run-2")  # the next run is not blocked by it
    assert later.sealed == [] and later.quarantined == []

    info = explain_hour(config, settings, "2026-11-22T10")
    assert info["state"] == "quarantine" and not info["sealed"]
    assert "QUARANTINED" in render_hour(info) and "tidemark release" in render_hour(info)
    assert not (Path(settings.warehouse) / config.table / "dt=2026-11-22/hr=10/_SUCCESS").exists()
    # a quarantined hour is invisible to path readers and MSCK REPAIR: not in the table's dt=/hr= tree
    assert not (Path(settings.warehouse) / config.table / "dt=2026-11-22/hr=10").exists()

    entry = run_release(spark, config, settings, "2026-11-22T10", "release-1")
    assert (entry.kind, entry.version, entry.rows) == ("release", 1, 3)
    assert registered(spark, config.table) == ["dt=2026-11-22/hr=10", "dt=2026-11-22/hr=11"]
    assert (Path(settings.warehouse) / config.table / "dt=2026-11-22/hr=10/_SUCCESS").exists()
    with pytest.raises(ReleaseError, match="not quarantined: its state is release v1"):
        run_release(spark, config, settings, "2026-11-22T10", "release-2")
    kinds = [(e.hour, e.kind) for e in HourJournal(settings.state_location, config.table).entries()]
    assert kinds == [
        ("2026-11-22T10", "quarantine"),
        ("2026-11-22T11", "seal"),
        ("2026-11-22T10", "release"),
    ]


def test_warn_registers_the_hour_and_records_the_failures(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(
        settings, tmp_path, quality__expectations=AMOUNT_AT_MOST_100, quality__policy="warn"
    )
    create_topic(broker, config.source.topic, 1)
    bad_hour_10(broker, config.source.topic)
    run_dump(spark, config, settings, "run-1", at(12, 40))
    result = run_seal(spark, config, settings, "run-1")
    assert result.sealed == ["2026-11-22T10", "2026-11-22T11"]
    assert registered(spark, config.table) == ["dt=2026-11-22/hr=10", "dt=2026-11-22/hr=11"]
    hours = HourJournal(settings.state_location, config.table).state().hours
    assert hours["2026-11-22T10"].quality["status"] == "failed"
    assert len(hours["2026-11-22T10"].quality["failures"]) == 2
    q11 = hours["2026-11-22T11"].quality
    assert {k: q11[k] for k in ("status", "policy", "failures", "evaluated")} == {
        "status": "passed",
        "policy": "warn",
        "failures": [],
        "evaluated": 5,
    }
    docs = settings.state_dir / config.table / "data_docs"
    page = docs / hours["2026-11-22T10"].quality["data_docs"]
    assert "/2026-11-22T10/" in str(page) and not page.exists()  # rendered later, not by the seal
    assert sorted(render_pending(docs)) == sorted(h.quality["data_docs"] for h in hours.values())
    assert page.exists() and render_pending(docs) == []
    text = page.read_text()
    assert "event_id" in text and "amount" in text and "unique" in text.lower()
