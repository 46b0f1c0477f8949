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

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.seal.metastore import quote_identifier
from tidemark.time.hours import Hour

if TYPE_CHECKING:
    import pyarrow as pa
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


@dataclass(frozen=True)
class Summary:
    """The aggregates the defaults are judged from (``null`` per key column, in key order)."""

    rows: int
    outside: int
    duplicates: int
    judged: int
    nulls: tuple[int, ...]


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
    row = keyed.agg(
        F.sum(n).alias("rows"),
        F.sum("_out").alias("outside"),
        F.sum(F.when((n > 1) & judged, n).otherwise(0)).alias("duplicates"),
        F.sum(F.when(judged, n).otherwise(0)).alias("judged"),
        *(
            F.sum(F.when(F.col(quote_identifier(c)).isNull(), n).otherwise(0)).alias(f"null{i}")
            for i, c in enumerate(key)
        ),
    ).first()
    assert row is not None
    summary = Summary(
        rows=int(row["rows"] or 0),
        outside=int(row["outside"] or 0),
        duplicates=int(row["duplicates"] or 0),
        judged=int(row["judged"] or 0),
        nulls=tuple(int(row[f"null{i}"] or 0) for i in range(len(key))),
    )
    return results_of(
        specs,
        key,
        summary,
        duplicate_sample=lambda kind: _duplicate_sample(keyed, key, kind),
        outside_sample=lambda: [r[0] for r in frame.where(outside).select(at).limit(SAMPLE).collect()],
    )


def results_of(
    specs: list[tuple[str, dict[str, Any]]],
    key: list[str],
    summary: Summary,
    *,
    duplicate_sample: Callable[[str], list[Any]],
    outside_sample: Callable[[], list[Any]],
) -> list[CheckResult]:
    """The defaults' outcomes from their aggregates, by whichever engine computed them (a
    sample is asked for only where its check failed)."""
    rows = summary.rows
    results = []
    for kind, kwargs in specs:
        if kind == NOT_NULL:
            nulls = summary.nulls[key.index(kwargs["column"])]
            results.append(
                _map_result(
                    kind, kwargs, rows=rows, judged=rows, unexpected=nulls, sample=[None] * min(nulls, SAMPLE)
                )
            )
        elif kind in (UNIQUE, COMPOUND_UNIQUE):
            duplicates = summary.duplicates
            results.append(
                _map_result(
                    kind,
                    kwargs,
                    rows=rows,
                    judged=summary.judged,
                    unexpected=duplicates,
                    sample=duplicate_sample(kind) if duplicates else [],
                )
            )
        elif kind == BETWEEN:
            count = summary.outside
            sample = outside_sample() if count else []
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


@dataclass(frozen=True)
class ArrowChecks:
    """The defaults of an hour computed by pyarrow inside the task that compacts it (one pass
    over the rows being written, no Spark job): the columns they need and how to judge them.
    Picklable, for the task; ``summarize`` gives what ``default_results`` gives Spark's way."""

    key: tuple[str, ...]
    unique: bool
    event_time: str

    @classmethod
    def of(cls, config: TableConfig, hour: Hour) -> ArrowChecks | None:
        specs = default_specs(config, hour)
        if not specs:
            return None
        unique = any(kind in (UNIQUE, COMPOUND_UNIQUE) for kind, _ in specs)
        return cls(tuple(config.primary_key), unique, config.event_time.field)

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys((*self.key, self.event_time)))

    def summarize(self, table: pa.Table, start: datetime, end: datetime) -> ArrowSummary:
        """The aggregates and both samples over ``table`` (the check columns of an hour's rows)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        at = table.column(self.event_time)
        zone = getattr(at.type, "tz", None)
        bounds = [pa.scalar(b if zone else naive_utc(b), type=at.type) for b in (start, end)]
        outside = pc.fill_null(pc.or_(pc.less(at, bounds[0]), pc.greater_equal(at, bounds[1])), False)
        key = list(self.key)
        nulls = tuple(table.column(c).null_count for c in key)
        if self.unique and _all_distinct(table, key):  # the common case, 4x cheaper than grouping
            duplicates, sample, judged_rows = 0, [], table.num_rows - nulls[0]
        elif self.unique:
            groups = table.select(key).group_by(key, use_threads=False).aggregate([([], "count_all")])
            n = groups.column("count_all")
            judged = _arrow_judged(groups, key)
            repeated = pc.and_(pc.greater(n, 1), judged)
            duplicates = int(pc.sum(pc.if_else(repeated, n, 0)).as_py() or 0)
            judged_rows = int(pc.sum(pc.if_else(judged, n, 0)).as_py() or 0)
            sample = _duplicate_values(groups.filter(repeated).slice(0, SAMPLE), key) if duplicates else []
        else:
            duplicates, sample = 0, []
            judged_rows = int(pc.sum(_arrow_judged(table, key)).as_py() or 0) if key else table.num_rows
        outside_count = int(pc.sum(outside).as_py() or 0)
        return ArrowSummary(
            Summary(table.num_rows, outside_count, duplicates, judged_rows, nulls),
            duplicate_sample=sample,
            outside_sample=[_python(v) for v in at.filter(outside).slice(0, SAMPLE).to_pylist()],
        )


@dataclass(frozen=True)
class ArrowSummary:
    summary: Summary
    duplicate_sample: list[Any]
    outside_sample: list[Any]

    def results(self, config: TableConfig, hour: Hour) -> list[CheckResult]:
        return results_of(
            default_specs(config, hour),
            list(config.primary_key),
            self.summary,
            duplicate_sample=lambda kind: self.duplicate_sample,
            outside_sample=lambda: self.outside_sample,
        )


def _all_distinct(table: pa.Table, key: list[str]) -> bool:
    """A single key column whose non-null values are all distinct (a hash set of the values,
    no group counts); False where it is not, or the key is compound or of a type pyarrow
    cannot hash (the grouping judges those)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(key) != 1:
        return False
    column = table.column(key[0])
    try:
        distinct = len(pc.unique(column)) - (1 if column.null_count else 0)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return distinct == len(column) - column.null_count


def _arrow_judged(table: pa.Table, key: list[str]) -> pa.ChunkedArray:
    """``_judged`` for pyarrow: a single key not null, a compound key not all null."""
    import pyarrow.compute as pc

    judged = pc.is_valid(table.column(key[0]))
    for column in key[1:]:
        judged = pc.or_(judged, pc.is_valid(table.column(column)))
    return judged


def _duplicate_values(groups: pa.Table, key: list[str]) -> list[Any]:
    """As ``_duplicate_sample``: one value per row of a duplicated key, up to SAMPLE."""
    sample: list[Any] = []
    for row in groups.to_pylist():
        value = _python(row[key[0]]) if len(key) == 1 else {c: _python(row[c]) for c in key}
        sample.extend([value] * int(row["count_all"]))
    return sample[:SAMPLE]


def _python(value: Any) -> Any:
    """A value as Spark's ``collect`` hands it over: timestamps naive, in UTC (the session's
    zone)."""
    return naive_utc(value) if isinstance(value, datetime) and value.tzinfo else value
