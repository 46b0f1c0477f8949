"""The default expectations computed in one Spark pass mean what Great Expectations means:
on the same tiny frames, each check's verdict and unexpected count equal GX's own; and the
same checks computed by pyarrow in a compaction's task (``ArrowChecks``) equal Spark's, field
by field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.helpers.classify import events_config
from tidemark.seal.checks import ArrowChecks, CheckResult, default_results, default_specs
from tidemark.seal.quality import _run_gx
from tidemark.time.hours import parse_key

pytestmark = pytest.mark.integration

HOUR = parse_key("2026-11-22T10", "UTC")
T = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)


def verdicts_both_ways(spark: Any, config: Any, rows: list[tuple[Any, ...]], schema: str) -> list[Any]:
    frame = spark.createDataFrame(rows, schema)
    ours = default_results(frame, config, HOUR)
    theirs = _run_gx(config, HOUR, frame, default_specs(config, HOUR))

    def domain(kind: str, kwargs: Any) -> tuple[str, str]:
        return kind, str(kwargs.get("column") or kwargs.get("column_list"))

    by_expectation = {domain(r.expectation_config.type, r.expectation_config.kwargs): r for r in theirs}
    assert len(by_expectation) == len(ours)
    for mine in ours:
        gx = by_expectation[domain(mine.kind, mine.kwargs)]
        assert mine.success == gx.success, (mine, gx.result)
        for key in ("unexpected_count", "observed_value", "element_count", "missing_count"):
            if key in gx.result:
                assert mine.result[key] == gx.result[key], (mine.kind, key, mine.result, gx.result)
        if "partial_unexpected_list" in gx.result:
            assert sorted(map(str, mine.result["partial_unexpected_list"])) == sorted(
                map(str, gx.result["partial_unexpected_list"])
            ), mine.kind
    assert_same_results(arrow_results(frame, config), ours)
    return ours


def arrow_results(frame: Any, config: Any) -> list[CheckResult]:
    """The defaults as a compaction's task computes them, on the rows as Arrow hands them."""
    checks = ArrowChecks.of(config, HOUR)
    assert checks is not None
    table = frame.toArrow().select(checks.columns)
    return checks.summarize(table, HOUR.start, HOUR.end).results(config, HOUR)


def assert_same_results(arrow: list[CheckResult], spark: list[CheckResult]) -> None:
    assert [(r.kind, r.kwargs, r.success) for r in arrow] == [(r.kind, r.kwargs, r.success) for r in spark]
    for mine, theirs in zip(arrow, spark, strict=True):
        assert mine.result.keys() == theirs.result.keys(), mine.kind
        for key, value in theirs.result.items():
            if key == "partial_unexpected_list":
                assert sorted(map(str, mine.result[key])) == sorted(map(str, value)), mine.kind
            else:
                assert mine.result[key] == value, (mine.kind, key, mine.result, theirs.result)


def test_a_single_key_with_duplicates_nulls_and_rows_outside_the_hour(spark: Any) -> None:
    config = events_config()
    rows = [
        ("a", T),
        ("dup", T),
        ("dup", T + timedelta(minutes=1)),
        ("dup", T),
        (None, T),
        (None, T),
        ("early", HOUR.start - timedelta(microseconds=1)),
        ("end", HOUR.end),  # the end is outside: [start, end)
        ("last", HOUR.end - timedelta(microseconds=1)),
    ]
    ours = verdicts_both_ways(spark, config, rows, "event_id string, event_time timestamp")
    got = {
        r.kind: (r.success, r.result.get("unexpected_count", r.result.get("observed_value"))) for r in ours
    }
    assert got == {
        "expect_column_values_to_not_be_null": (False, 2),
        "expect_column_values_to_be_unique": (False, 3),
        "expect_column_values_to_be_between": (False, 2),
        "expect_table_row_count_to_be_between": (True, 9),
    }


def test_a_compound_key_judges_rows_whose_key_is_not_all_null(spark: Any) -> None:
    config = events_config(primary_key=["event_id", "user_id"])
    rows = [
        ("a", 1, T),
        ("a", 1, T),
        ("a", None, T),
        ("a", None, T),
        (None, None, T),
        (None, None, T),
        ("b", 1, T),
    ]
    ours = verdicts_both_ways(spark, config, rows, "event_id string, user_id bigint, event_time timestamp")
    assert [(r.success, r.result.get("unexpected_count")) for r in ours[:3]] == [
        (False, 2),
        (False, 4),
        (False, 4),
    ]


def test_a_clean_hour_passes_every_default(spark: Any) -> None:
    config = events_config()
    rows = [(f"e{i}", HOUR.start + timedelta(minutes=i)) for i in range(60)]
    ours = verdicts_both_ways(spark, config, rows, "event_id string, event_time timestamp")
    assert all(r.success for r in ours) and ours[-1].result == {"observed_value": 60}


def test_a_table_without_a_key_counts_each_row_once(spark: Any) -> None:
    config = events_config(primary_key=[])
    rows = [("a", T), ("a", T), ("late", HOUR.end + timedelta(minutes=5))]
    ours = verdicts_both_ways(spark, config, rows, "event_id string, event_time timestamp")
    assert [(r.kind, r.success) for r in ours] == [
        ("expect_column_values_to_be_between", False),
        ("expect_table_row_count_to_be_between", True),
    ]
    assert ours[0].result["unexpected_count"] == 1 and ours[1].result == {"observed_value": 3}


def test_the_arrow_checks_judge_a_number_key_and_a_null_event_time_as_spark_does(spark: Any) -> None:
    """Rows whose event time is null are not outside the hour (Spark's comparison is null),
    and the engines agree on a number key; GX is not asked here (it is above)."""
    config = events_config(primary_key=["user_id"])
    rows = [(1, T), (1, None), (2, HOUR.end + timedelta(hours=1)), (None, T)]
    frame = spark.createDataFrame(rows, "user_id bigint, event_time timestamp")
    ours = default_results(frame, config, HOUR)
    assert_same_results(arrow_results(frame, config), ours)
    assert [r.result.get("unexpected_count") for r in ours[:3]] == [1, 2, 1]
