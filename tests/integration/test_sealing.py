"""Sealing against the real broker, Spark and the Hive metastore (embedded Derby):
watermarks, idle partitions, late data in both policies, DST, empty hours, hostile values."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.jobs import seal_killed_at
from tests.helpers.tables import at, fresh_table, landed, late_landed, registered
from tidemark.config import TableConfig
from tidemark.errors import InjectedFault
from tidemark.ingest.dump import run_dump
from tidemark.observe.status import explain_hour
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration


def cycle(spark: Any, config: TableConfig, settings: Settings, run: str, processing: datetime) -> Any:
    """One ingest DAG run: dump then seal, with the same run id."""
    run_dump(spark, config, settings, run, processing)
    return run_seal(spark, config, settings, run)


def hour_count(spark: Any, table: str, dt: str, hr: str) -> int:
    spark.catalog.refreshTable(table)  # this session may have listed the files before an amend
    return int(spark.sql(f"SELECT count(*) FROM `{table}` WHERE dt = '{dt}' AND hr = '{hr}'").first()[0])


def test_disorder_within_tolerance_on_time_late_rows_to_side_table(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 2)
    first = produce(
        broker,
        config.source.topic,
        records(
            [(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 5)]  # hour 10
            + [(0, at(11, 50)), (1, at(11, 45)), (0, at(11, 20)), (1, at(11, 5))]
            + [(0, at(10, 58))]  # out of order, inside the 10 minute tolerance: on time
        ),
    )
    result = cycle(spark, config, settings, "run-1", at(12))
    # ready = min(11:50, 11:45) - 10m = 11:35 -> hour 10 (ends 11:00 + 5m delay) sealed, 11 open
    assert result.sealed == ["2026-11-22T10"]
    assert registered(spark, config.table) == ["dt=2026-11-22/hr=10"]
    assert hour_count(spark, config.table, "2026-11-22", "10") == 25

    second = produce(
        broker,
        config.source.topic,
        records(
            # the first two are for hour 10, sealed already: late
            [(0, at(10, 30)), (1, at(10, 59)), (0, at(11, 59)), (0, at(12, 30)), (1, at(12, 20))],
            prefix="b",
        ),
    )
    result = cycle(spark, config, settings, "run-2", at(12, 30))
    assert result.sealed == ["2026-11-22T11"]  # ready = 12:10 >= 12:00 + 5m
    assert result.late_registered == ["2026-11-22T10"]
    assert registered(spark, config.table) == ["dt=2026-11-22/hr=10", "dt=2026-11-22/hr=11"]
    assert registered(spark, config.late_table) == ["dt=2026-11-22/hr=10"]
    assert hour_count(spark, config.table, "2026-11-22", "10") == 25  # sealed hour untouched
    assert hour_count(spark, config.table, "2026-11-22", "11") == 5
    assert hour_count(spark, config.late_table, "2026-11-22", "10") == 2

    rows, dirty, _ = landed(settings, config.table)
    late = late_landed(settings, config.table)
    produced = Counter((p, o) for p, o, _ in first + second)
    assert rows + dirty + late == produced and max((rows + late).values()) == 1
    state = CommitLog(settings.state_dir, config.table).state()
    assert state.late == 2 and state.late_per_hour == {"dt=2026-11-22/hr=10": 2}
    assert not (Layout(settings, config.table).open_dir / "dt=2026-11-22/hr=10").exists()


def test_amend_folds_late_rows_into_a_new_version(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, late_policy="amend")
    create_topic(broker, config.source.topic, 1)
    produce(
        broker, config.source.topic, records([(0, at(10, m)) for m in range(0, 60, 10)] + [(0, at(11, 30))])
    )
    assert cycle(spark, config, settings, "run-1", at(12)).sealed == ["2026-11-22T10"]
    produce(broker, config.source.topic, records([(0, at(10, 15)), (0, at(10, 45))], prefix="late"))
    result = cycle(spark, config, settings, "run-2", at(12, 10))
    assert result.amended == ["2026-11-22T10"]
    assert hour_count(spark, config.table, "2026-11-22", "10") == 8
    entries = list(HourJournal(settings.state_dir, config.table).entries())
    assert [(e.kind, e.version, e.rows, e.late) for e in entries] == [("seal", 1, 6, 0), ("amend", 2, 8, 2)]
    again = run_seal(spark, config, settings, "run-2")  # retry: nothing new to fold
    assert again.amended == [] and hour_count(spark, config.table, "2026-11-22", "10") == 8
    assert registered(spark, config.table) == ["dt=2026-11-22/hr=10"]


def test_slow_partition_holds_idle_one_is_released_then_held_again(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 2)
    produce(broker, config.source.topic, records([(0, at(10, 5)), (0, at(11, 40)), (1, at(10, 10))]))
    result = cycle(spark, config, settings, "run-1", at(12))
    assert result.sealed == []  # partition 1's watermark (10:00) holds hour 10
    why = explain_hour(config, settings, "2026-11-22T10")
    assert why["sealed"] is False and why["held_by"]["partition"] == 1
    assert why["held_by"]["must_advance_by_seconds"] == 3900  # watermark 10:00, needs 11:05

    produce(broker, config.source.topic, records([(0, at(12, 40))], prefix="p0"))
    result = cycle(spark, config, settings, "run-2", at(12, 30))  # partition 1 quiet for 30 minutes
    assert result.sealed == ["2026-11-22T10", "2026-11-22T11"]  # ready 12:30 with p1 idle
    why = explain_hour(config, settings, "2026-11-22T12")
    assert why["sealed"] is False and why["idle_partitions"] == [1]

    produce(broker, config.source.topic, records([(1, at(12, 20)), (0, at(13, 0))], prefix="back"))
    cycle(spark, config, settings, "run-3", at(12, 50))
    state = CommitLog(settings.state_dir, config.table).state()
    assert state.ready is not None and state.ready.idle == () and state.ready.holding == 1
    assert state.ready.time == at(12, 30).isoformat()  # held by p1 (12:10), never moved back


def test_future_timestamp_is_dirty_and_seals_nothing_early(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, dirty__max_dirty_ratio=0.5)
    create_topic(broker, config.source.topic, 1)
    produce(broker, config.source.topic, records([(0, at(10, 20)), (0, at(23, 0)), (0, at(10, 40))]))
    result = cycle(spark, config, settings, "run-1", at(11))
    assert result.sealed == [] and result.ready_time == at(10, 30).isoformat()
    _, _, reasons = landed(settings, config.table)
    assert list(reasons.values()) == ["future_event_time"]


def test_empty_hours_sealed_empty_and_reseal_is_a_noop(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 1)
    produce(broker, config.source.topic, records([(0, at(10, 30)), (0, at(13, 30))]))
    result = cycle(spark, config, settings, "run-1", at(14))
    assert result.sealed == ["2026-11-22T10", "2026-11-22T11", "2026-11-22T12"]
    layout = Layout(settings, config.table)
    for hr, rows in (("10", 1), ("11", 0), ("12", 0)):
        assert (layout.table_dir / f"dt=2026-11-22/hr={hr}/_SUCCESS").exists()
        assert hour_count(spark, config.table, "2026-11-22", hr) == rows
    files_before = sorted(p for p in layout.table_dir.rglob("*") if p.is_file())
    journal = HourJournal(settings.state_dir, config.table)
    again = run_seal(spark, config, settings, "run-1")
    assert again.sealed == [] and again.status == "nothing_to_seal"
    assert sorted(p for p in layout.table_dir.rglob("*") if p.is_file()) == files_before
    assert len(list(journal.entries())) == 3


def test_dst_fall_back_seals_the_right_local_hours(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, event_time__time_zone="America/New_York")
    create_topic(broker, config.source.topic, 1)
    utc0 = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)  # 00:00 EDT; 01:00 happens twice
    times = [utc0 + timedelta(minutes=15 * i) for i in range(16)]  # 4 UTC hours, 4 rows each
    produce(
        broker,
        config.source.topic,
        records([(0, t) for t in times] + [(0, utc0 + timedelta(hours=4, minutes=30))]),
    )
    result = cycle(spark, config, settings, "run-1", utc0 + timedelta(hours=5))
    assert result.sealed == ["2026-11-01T00", "2026-11-01T01", "2026-11-01T01b", "2026-11-01T02"]
    assert registered(spark, config.table) == [
        "dt=2026-11-01/hr=00",
        "dt=2026-11-01/hr=01",
        "dt=2026-11-01/hr=01b",
        "dt=2026-11-01/hr=02",
    ]
    for hr in ("00", "01", "01b", "02"):
        assert hour_count(spark, config.table, "2026-11-01", hr) == 4


def test_hostile_partition_values_are_dirty_and_the_metastore_untouched(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(
        settings, tmp_path, partitioning__columns=["app"], dirty__max_dirty_ratio=0.9
    )
    create_topic(broker, config.source.topic, 1)
    hostile = ["../x", "a'b", "'; DROP TABLE x; --", "a/b", "..", " web", "x" * 65]
    produce(
        broker,
        config.source.topic,
        records(
            [(0, at(10, i), {"app": v}) for i, v in enumerate(hostile)]
            + [
                (0, at(10, 30), {"app": "web"}),
                (0, at(10, 31), {"app": "ios"}),
                (0, at(11, 30), {"app": "web"}),
            ]
        ),
    )
    result = cycle(spark, config, settings, "run-1", at(12))
    assert result.sealed == ["2026-11-22T10"]
    _, _, reasons = landed(settings, config.table)
    assert sorted(reasons.values()) == ["invalid_partition_value"] * len(hostile)
    assert registered(spark, config.table) == ["dt=2026-11-22/hr=10/app=ios", "dt=2026-11-22/hr=10/app=web"]
    warehouse = Path(settings.warehouse)
    assert not (warehouse / "x").exists() and not list(warehouse.rglob("*DROP*"))


def test_partition_values_are_bounded_per_hour_and_a_retry_admits_the_same(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, settings = fresh_table(
        settings,
        tmp_path,
        partitioning__columns=["app"],
        partitioning__max_values_per_column=3,
        dirty__max_dirty_ratio=0.9,
    )
    create_topic(broker, config.source.topic, 1)
    apps = ["web", "zeta", "ios", "alpha", "web"]
    first = produce(
        broker,
        config.source.topic,
        records([(0, at(10, i), {"app": a}) for i, a in enumerate(apps)] + [(0, at(11, 1), {"app": "zeta"})]),
    )
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    monkeypatch.setenv("TIDEMARK_FAIL_AT", "before_commit_record")
    with pytest.raises(InjectedFault):
        run_dump(spark, config, settings, "run-1", at(11, 30))
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    run_dump(spark, config, settings, "run-1", at(11, 30))  # the retry decides the same
    _, _, reasons = landed(settings, config.table)
    assert {o: r for (_, o), r in reasons.items()} == {1: "partition_cardinality"}  # zeta, hour 10
    log = CommitLog(settings.state_dir, config.table)
    assert log.state().partition_values == {
        "dt=2026-11-22/hr=10": {"app": ["alpha", "ios", "web"]},
        "dt=2026-11-22/hr=11": {"app": ["zeta"]},
    }

    second = produce(
        broker,
        config.source.topic,
        records(
            [(0, at(10, 40), {"app": "aaa"}), (0, at(10, 41), {"app": "web"})]  # hour 10 is full
            + [(0, at(11, 10 + i), {"app": a}) for i, a in enumerate(["d", "c", "b"])]  # room for 2
            + [(0, at(12, 30))],
            prefix="b",
        ),
    )
    result = cycle(spark, config, settings, "run-2", at(12, 40))
    assert result.sealed == ["2026-11-22T10", "2026-11-22T11"]
    rows, dirty, reasons = landed(settings, config.table)
    assert sorted(reasons.values()) == ["partition_cardinality"] * 3  # zeta@10, aaa@10, d@11
    assert rows + dirty == Counter((p, o) for p, o, _ in first + second)
    assert registered(spark, config.table) == [
        "dt=2026-11-22/hr=10/app=alpha",
        "dt=2026-11-22/hr=10/app=ios",
        "dt=2026-11-22/hr=10/app=web",
        "dt=2026-11-22/hr=11/app=b",
        "dt=2026-11-22/hr=11/app=c",
        "dt=2026-11-22/hr=11/app=zeta",
    ]
    assert hour_count(spark, config.table, "2026-11-22", "10") == 5


@pytest.mark.parametrize("fail_at", ["after_registration", "mid_compaction"])
def test_a_seal_that_failed_before_its_journal_entry_converges_after_a_straggler(
    fail_at: str, spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seal compacts hour 10 (marker written) and fails before the journal entry; the next
    ingest run dumps a straggler for hour 10; seal runs again: hour 10 holds every committed
    row exactly once, and later hours seal too (a stale marker once stopped them for good)."""

    config, settings = fresh_table(settings, tmp_path)
    create_topic(broker, config.source.topic, 2)
    produce(
        broker,
        config.source.topic,
        records(
            [(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)] + [(0, at(11, 50)), (1, at(11, 45))]
        ),
    )
    run_dump(spark, config, settings, "run-1", at(12))
    seal_killed_at(spark, config, settings, monkeypatch, fail_at)
    # a straggler of hour 10 (inside the tolerance of the watermark, which has not sealed it)
    produce(
        broker, config.source.topic, records([(1, at(10, 59)), (0, at(12, 40)), (1, at(12, 35))], prefix="s")
    )
    result = cycle(spark, config, settings, "run-2", at(13))
    assert result.sealed == ["2026-11-22T10", "2026-11-22T11"]
    assert hour_count(spark, config.table, "2026-11-22", "10") == 13
    state = CommitLog(settings.state_dir, config.table).state()
    entries = HourJournal(settings.state_dir, config.table).state().hours
    assert entries["2026-11-22T10"].rows == 13 == state.rows_per_hour["dt=2026-11-22/hr=10"]
    assert entries["2026-11-22T11"].rows == state.rows_per_hour["dt=2026-11-22/hr=11"]
    hour_files = list((Layout(settings, config.table).table_dir / "dt=2026-11-22/hr=10").rglob("*.parquet"))
    assert sorted(f"{config.table}/dt=2026-11-22/hr=10/{p.name}" for p in hour_files) == sorted(
        entries["2026-11-22T10"].files
    )
    rows, dirty, _ = landed(settings, config.table)
    assert max(rows.values()) == 1 and not dirty  # nothing published twice


def test_no_hour_seals_before_processing_time_has_passed_its_end(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """One record stamped ahead of processing time (inside max_future_skew) on an otherwise
    quiet topic must not seal its hour before the hour is over."""
    config, settings = fresh_table(
        settings, tmp_path, watermark__max_out_of_orderness="0s", watermark__commit_delay="0s"
    )
    create_topic(broker, config.source.topic, 1)
    produce(broker, config.source.topic, records([(0, at(11, 30)), (0, at(12, 4))]))
    early = cycle(spark, config, settings, "run-1", at(11, 50))
    assert early.sealed == [] and early.ready_time == at(12, 4).isoformat()
    on_time = cycle(spark, config, settings, "run-2", at(12, 1))
    assert on_time.sealed == ["2026-11-22T11"]
