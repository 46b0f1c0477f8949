"""The Arrow classification of raw MQ records (pure: pyarrow, no Spark, no broker)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa  # noqa: TID253
import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tests.helpers.classify import GOOD, block, event, events_config, spec_of
from tidemark.config import TableConfig
from tidemark.errors import ConfigError
from tidemark.ingest.classify import Classifier
from tidemark.ingest.frames import as_classified
from tidemark.ingest.jsonlines import PARSE_PIECE
from tidemark.ingest.staging import StagingTargets, TaskStager, staged_rows
from tidemark.time.hours import hour_of

pytestmark = pytest.mark.unit


def reasons(config: TableConfig, values: Sequence[bytes | None]) -> dict[int, tuple[str, str | None]]:
    out = Classifier(spec_of(config)).classify(block(values)).dirty.to_pylist()
    return {r["mq_offset"] - 100: (r["reason"], r["detail"]) for r in out}


def test_each_bad_input_gets_its_reason_and_the_fields_named(tmp_path: Path) -> None:
    config = events_config(tmp_path)
    values = [
        event(),
        b'{"event_id": "broken',
        b"[1, 2]",
        None,
        b"x" * (config.source.max_message_bytes + 1),
        event(event_time=None),
        event(event_type=...),
        event(user_id="12"),  # strict: a string is not a number
        event(amount="12.345"),  # strict: no rounding to the scale
        event(event_time="yesterday"),
        event(event_time="2026-11-22T12:30:00Z"),  # beyond processing time + 15m
        event(user_id="x", event_type=None),  # missing comes before mismatch
        event(event_id=17, user_id=1.5),  # both named
        event()[:-1] + b', "event_id": "again"}',
        b"",
        b"   ",
    ]
    got = reasons(config, values)
    assert got.pop(0, None) is None
    assert got[1][0] == "invalid_json" and "Unterminated string" in str(got[1][1])
    assert got[2][0] == "invalid_json"
    assert got[3] == ("tombstone", None)
    assert got[4] == ("oversized", f"bytes={config.source.max_message_bytes + 1}")
    assert got[5] == ("null_event_time", None)
    assert got[6] == ("missing_field", "fields=event_type")
    assert got[7] == ("type_mismatch", "fields=user_id")
    assert got[8] == ("type_mismatch", "fields=amount")
    assert got[9] == ("type_mismatch", "fields=event_time")
    assert got[10] == ("future_event_time", "limit=2026-11-22T12:15:00+00:00")
    assert got[11] == ("missing_field", "fields=event_type")
    assert got[12] == ("type_mismatch", "fields=event_id,user_id")
    assert got[13][0] == "invalid_json"  # a key given twice
    assert got[14][0] == "invalid_json" and got[15][0] == "invalid_json"
    assert len(got) == len(values) - 1


def test_good_rows_are_typed_with_lineage_and_late_flag(tmp_path: Path) -> None:
    config = events_config(tmp_path)
    sealed = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    values = [
        event(event_time="2026-11-22 09:59:59.5+00:00"),
        event(event_time="2026-11-22T11:30:00+01:00", amount=3),
        # pretty-printed JSON is re-read on one line
        json.dumps({**GOOD, "extra": {"nested": [1, 2]}}, indent=2).encode(),
    ]
    out = Classifier(spec_of(config, sealed)).classify(block(values))
    assert out.dirty.num_rows == 0
    rows = out.good.to_pylist()
    assert [r["_mq_offset"] for r in rows] == [100, 101, 102]
    assert [(r["dt"], r["hr"], r["_late"]) for r in rows] == [
        ("2026-11-22", "09", True),
        ("2026-11-22", "10", False),
        ("2026-11-22", "10", False),
    ]
    assert rows[1]["event_time"] == datetime(2026, 11, 22, 10, 30, tzinfo=UTC)
    assert str(rows[1]["amount"]) == "3.00" and rows[0]["user_id"] == 7
    assert {r["_mq_partition"] for r in rows} == {2} and {r["_batch_id"] for r in rows} == {4}
    assert out.good.schema.field("amount").type == pa.decimal128(12, 2)


def test_narrowing_a_rejected_block_classifies_each_record_as_alone(tmp_path: Path) -> None:
    """Whatever else is in its block, a record gets the reason it gets on its own."""
    config = events_config(tmp_path)
    rng = random.Random(3)
    kinds = [
        lambda i: event(event_id=f"e{i}"),
        lambda i: b'{"event_id": ' + str(i).encode(),
        lambda i: event(event_id=f"e{i}", user_id=str(i)),
        lambda i: event(event_id=f"e{i}", user_id=2**70),
        lambda i: event(event_id=f"e{i}", event_time="not a time"),
        lambda i: event(event_id=f"e{i}", event_type=...),
    ]
    values = [rng.choice(kinds if rng.random() < 0.05 else kinds[:1])(i) for i in range(3 * PARSE_PIECE + 17)]
    together = reasons(config, values)
    alone = {i: r for i, v in enumerate(values) for r in reasons(config, [v]).values()}
    assert together == alone
    assert len(together) > 10


@pytest.mark.parametrize("zone", ["America/New_York", "Europe/Berlin", "Asia/Kolkata"])
def test_hour_labels_follow_hour_of_across_dst_days(tmp_path: Path, zone: str) -> None:
    config = events_config(tmp_path, event_time__time_zone=zone, watermark__max_future_skew="1000d")
    instants = [
        day + timedelta(minutes=10 * i)
        for day in (
            datetime(2026, 3, 8, tzinfo=UTC),
            datetime(2026, 3, 29, tzinfo=UTC),
            datetime(2026, 10, 25, tzinfo=UTC),
            datetime(2026, 11, 1, tzinfo=UTC),
        )
        for i in range(6 * 30)
    ]
    values = [event(event_time=t.isoformat()) for t in instants]
    good = Classifier(spec_of(config)).classify(block(values)).good
    got = list(zip(good.column("dt").to_pylist(), good.column("hr").to_pylist(), strict=True))
    assert got == [(hour_of(t, zone).dt, hour_of(t, zone).hr) for t in instants]
    assert ("2026-11-01", "01b") in got if zone == "America/New_York" else True


def test_dates_naive_timestamps_and_structs(tmp_path: Path) -> None:
    """A naive timestamp (``timestamp_ntz``) classifies as written; no Hive table config takes
    one (test_a_timestamp_ntz_column_is_refused_by_a_hive_table), the classifier still does."""

    config = events_config(
        tmp_path,
        schema={
            "id": "string not null",
            "day": "date",
            "at": "timestamp not null",
            "tags": "array<string>",
            "geo": "struct<lat:double,lon:double>",
        },
        event_time__field="at",
        primary_key=["id"],
    )
    spec = spec_of(config)
    spec = replace(
        spec, columns=tuple((n, "timestamp_ntz not null" if n == "at" else t) for n, t in spec.columns)
    )
    values = [
        b'{"id":"a","day":"2026-11-22","at":"2026-11-22T10:00:00","tags":["x"],"geo":{"lat":1.5,"lon":2}}',
        b'{"id":"b","day":"22/11/2026","at":"2026-11-22T10:00:00"}',
        b'{"id":"c","day":20000,"at":"2026-11-22T10:00:00"}',
        b'{"id":"d","at":"2026-11-22T10:00:00","tags":"x"}',
    ]
    out = Classifier(spec).classify(block(values))
    good = out.good.to_pylist()
    assert [r["id"] for r in good] == ["a"]
    assert str(good[0]["day"]) == "2026-11-22" and good[0]["at"] == datetime(2026, 11, 22, 10, 0)
    assert good[0]["geo"] == {"lat": 1.5, "lon": 2.0} and good[0]["tags"] == ["x"]
    dirty = {r["mq_offset"] - 100: (r["reason"], r["detail"]) for r in out.dirty.to_pylist()}
    assert dirty == {
        1: ("type_mismatch", "fields=day"),
        2: ("type_mismatch", "fields=day"),
        3: ("type_mismatch", "fields=tags"),
    }


def test_a_timestamp_ntz_column_is_refused_by_a_hive_table(tmp_path: Path) -> None:
    """Hive 2.3's metastore refuses the type at CREATE TABLE: the seal of such a table failed
    after its batches had committed. Now the YAML is refused, naming the column."""
    with pytest.raises(ConfigError, match=r"column 'local': timestamp_ntz: the Hive metastore"):
        events_config(tmp_path, schema__local="timestamp_ntz")
    with pytest.raises(ConfigError, match=r"column 'nested': struct<at:timestamp_ntz>"):
        events_config(tmp_path, schema__nested="struct<at:timestamp_ntz>")


def test_map_columns_are_refused_by_the_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"column 'attrs': map<string,bigint>: JSON maps are not supported"):
        events_config(tmp_path, schema__attrs="map<string,bigint>")


def test_hostile_partition_values_are_dirty(tmp_path: Path) -> None:
    config = events_config(tmp_path, partitioning__columns=["app"])
    values = [event(app="web"), event(app="../etc"), event(app="a b"), event(app=None), event(app="x" * 65)]
    got = reasons(config, values)
    assert got == {i: ("invalid_partition_value", "fields=app") for i in range(1, 5)}


def test_classified_rows_and_staged_files_hold_every_record_once(tmp_path: Path) -> None:
    config = events_config(tmp_path)
    spec = spec_of(config, datetime(2026, 11, 22, 10, 0, tzinfo=UTC))
    values = [
        event(event_time="2026-11-22T09:10:00Z"),
        event(),
        b"nope",
        event(event_time="2026-11-22T11:10:00Z"),
    ]
    classified = Classifier(spec).classify(block(values))
    table = as_classified(classified, spec)
    assert sorted(table.column("_mq_offset").to_pylist()) == [100, 101, 102, 103]
    assert table.column("_reason").to_pylist().count("invalid_json") == 1
    assert table.column("_raw_value").to_pylist()[-1] == b"nope"

    targets = StagingTargets.local(tmp_path / "attempt")
    stager = TaskStager(targets, spec, mq_partition=2, start=100)
    stager.add(classified)
    stager.close()
    written = {kind: targets.store.files(kind) for kind in ("rows", "late", "dirty")}
    assert staged_rows(targets.store, written) == {"rows": 2, "late": 1, "dirty": 1}
    files = sorted(
        str(p.relative_to(tmp_path / "attempt")) for p in (tmp_path / "attempt").rglob("*.parquet")
    )
    assert files == [
        "dirty/p2-000000000100.parquet",
        "late/dt=2026-11-22/hr=09/p2-000000000100.parquet",
        "rows/dt=2026-11-22/hr=10/p2-000000000100.parquet",
        "rows/dt=2026-11-22/hr=11/p2-000000000100.parquet",
    ]
    assert "dt" not in pq.read_schema(tmp_path / "attempt" / files[2]).names
    stats = {(r.dt, r.hr, r.late, r.reason, r.n): (r.min_ts, r.max_ts) for r in stager.stats()}
    assert stats[("2026-11-22", "10", False, None, 1)] == (
        datetime(2026, 11, 22, 10, 15, tzinfo=UTC),
        datetime(2026, 11, 22, 10, 15, tzinfo=UTC),
    )
    assert stats[(None, None, False, "invalid_json", 1)] == (None, None)
