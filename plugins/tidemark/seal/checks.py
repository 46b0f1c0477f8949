"""The default expectations of an hour, computed in one Spark pass over its rows.

Great Expectations runs every metric of every expectation as its own Spark job (on the
standalone cluster its gate cost 10-12 s an hour, on this machine 5 s for 17k rows). The
defaults are a handful of aggregates over the same rows, so they are computed here as one
aggregation (grouped by the primary key when its uniqueness is checked), with GX's meaning
and GX's result shape, so that the journal, the health page and the Data Docs show them as
before: null counts, rows in duplicated keys (rows whose key is missing are not judged, as
GX's column-map expectations do), rows outside the hour, the row count. A failing check
costs one more small job for its sample of unexpected values.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.seal.metastore import quote_identifier
from tidemark.time.hours import Hour

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

SAMPLE = 20  # GX's partial_unexpected_count

NOT_NULL = "expect_column_values_to_not_be_null"
UNIQUE = "expect_column_values_to_be_unique"
COMPOUND_UNIQUE = "expect_compound_columns_to_be_unique"
BETWEEN = "expect_column_values_to_be_between"
ROW_COUNT = "expect_table_row_count_to_be_between"


@dataclass(frozen=True)
class CheckResult:
    """One expectation's outcome, in GX's terms (``result`` as GX's result dict)."""

    kind: str
    kwargs: dict[str, Any]
    success: bool
    result: dict[str, Any]


def default_specs(config: TableConfig, hour: Hour) -> list[tuple[str, dict[str, Any]]]:
    """(GX expectation type, kwargs) of the defaults for an hour (none when turned off)."""
    if not config.quality.default_expectations:
        return []
    key = list(config.primary_key)
    specs: list[tuple[str, dict[str, Any]]] = [(NOT_NULL, {"column": c}) for c in key]
    if config.cdc is None and len(key) == 1:
        specs.append((UNIQUE, {"column": key[0]}))
    elif config.cdc is None and key:
        specs.append((COMPOUND_UNIQUE, {"column_list": key}))
    specs.append(
        (
            BETWEEN,
            {
                "column": config.event_time.field,
                # Spark hands GX naive timestamps in the session zone, which is UTC
                "min_value": naive_utc(hour.start),
                "max_value": naive_utc(hour.end),
                "strict_max": True,
            },
        )
    )
    specs.append((ROW_COUNT, {"min_value": 1}))
    return specs


def naive_utc(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(tzinfo=None)


def default_results(frame: DataFrame, config: TableConfig, hour: Hour) -> list[CheckResult]:
    """The defaults' outcomes on ``frame`` (an hour's rows): one aggregation, and one small
    job per failing check for its sample."""
    from pyspark.sql import functions as F

    specs = default_specs(config, hour)
    if not specs:
        return []
    key = list(config.primary_key)
    unique = any(kind in (UNIQUE, COMPOUND_UNIQUE) for kind, _ in specs)
    at = frame[quote_identifier(config.event_time.field)]
    outside = (at < F.lit(hour.start)) | (at >= F.lit(hour.end))
    if unique:  # one shuffle by the key: rows per key, then everything from those
        keyed = frame.groupBy(*(frame[quote_identifier(c)] for c in key)).agg(
            F.count(F.lit(1)).alias("_n"), F.sum(F.when(outside, 1).otherwise(0)).alias("_out")
        )
    else:  # no key to group by: each row counts once
        keyed = frame.select(
            *(frame[quote_identifier(c)] for c in key),
            F.lit(1).alias("_n"),
            F.when(outside, 1).otherwise(0).alias("_out"),
        )
    n = F.col("_n")
    judged = _judged(key) if key else F.lit(True)
    summary = keyed.agg(
        F.sum(n).alias("rows"),
        F.sum("_out").alias("outside"),
        F.sum(F.when((n > 1) & judged, n).otherwise(0)).alias("duplicates"),
        F.sum(F.when(judged, n).otherwise(0)).alias("judged"),
        *(
            F.sum(F.when(F.col(quote_identifier(c)).isNull(), n).otherwise(0)).alias(f"null{i}")
            for i, c in enumerate(key)
        ),
    ).first()
    assert summary is not None
    rows = int(summary["rows"] or 0)
    results = []
    for kind, kwargs in specs:
        if kind == NOT_NULL:
            nulls = int(summary[f"null{key.index(kwargs['column'])}"] or 0)
            results.append(
                _map_result(
                    kind, kwargs, rows=rows, judged=rows, unexpected=nulls, sample=[None] * min(nulls, SAMPLE)
                )
            )
        elif kind in (UNIQUE, COMPOUND_UNIQUE):
            duplicates = int(summary["duplicates"] or 0)
            sample = _duplicate_sample(keyed, key, kind) if duplicates else []
            results.append(
                _map_result(
                    kind,
                    kwargs,
                    rows=rows,
                    judged=int(summary["judged"] or 0),
                    unexpected=duplicates,
                    sample=sample,
                )
            )
        elif kind == BETWEEN:
            count = int(summary["outside"] or 0)
            sample = [r[0] for r in frame.where(outside).select(at).limit(SAMPLE).collect()] if count else []
            results.append(_map_result(kind, kwargs, rows=rows, judged=rows, unexpected=count, sample=sample))
        else:
            results.append(CheckResult(kind, kwargs, rows >= kwargs["min_value"], {"observed_value": rows}))
    return results


def _judged(key: list[str]) -> Column:
    """Rows whose key is judged for uniqueness: a single key not null, a compound key not
    all null (GX's defaults for these expectations)."""
    from pyspark.sql import functions as F

    present = [F.col(quote_identifier(c)).isNotNull() for c in key]
    judged = present[0]
    for condition in present[1:]:
        judged = judged | condition
    return judged


def _duplicate_sample(keyed: DataFrame, key: list[str], kind: str) -> list[Any]:
    """Values of rows in duplicated keys, as GX lists them (one per row, up to SAMPLE)."""
    from pyspark.sql import functions as F

    found = keyed.where((F.col("_n") > 1) & _judged(key)).limit(SAMPLE).collect()
    sample: list[Any] = []
    for row in found:
        value = row[0] if kind == UNIQUE else {c: row[c] for c in key}
        sample.extend([value] * int(row["_n"]))
    return sample[:SAMPLE]


def _map_result(
    kind: str, kwargs: dict[str, Any], *, rows: int, judged: int, unexpected: int, sample: list[Any]
) -> CheckResult:
    """A column-map expectation's result: ``judged`` of ``rows`` were looked at (the rest
    missing), ``unexpected`` of them failed."""
    missing = rows - judged
    return CheckResult(
        kind,
        kwargs,
        unexpected == 0,
        {
            "element_count": rows,
            "missing_count": missing,
            "missing_percent": _percent(missing, rows),
            "unexpected_count": unexpected,
            "unexpected_percent": _percent(unexpected, judged),
            "unexpected_percent_total": _percent(unexpected, rows),
            "unexpected_percent_nonmissing": _percent(unexpected, judged),
            "partial_unexpected_list": sample,
        },
    )


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 0.0
