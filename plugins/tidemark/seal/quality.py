"""The quality gate run on an hour before it is registered: the default expectations in one
Spark pass (``checks.py``), the table's own with Great Expectations 1.x on the hour's rows in
Spark; the results of both are kept for the hour's GX Data Docs page, rendered later
(``seal/data_docs.py``).

Every table gets default expectations unless ``quality.default_expectations`` is false:

- each primary-key column is not null;
- the primary key is unique within the hour (not for ``cdc`` tables: a key changes many times
  an hour, and a change delivered twice is the merge's to deduplicate, by version and offset);
- the event time lies inside the hour, [start, end);
- the hour has rows (an hour sealed empty is not validated: it has no data to judge).

``quality.expectations`` adds GX expectation types with their arguments, e.g.
``{type: expect_column_values_to_be_between, kwargs: {column: amount, min_value: 0}}``.
The policy decides what a failure does: ``block`` quarantines the hour (not registered, not
announced, until ``tidemark release``), ``warn`` registers it and records the failures.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig, expectation_columns
from tidemark.errors import ConfigError
from tidemark.seal import data_docs
from tidemark.seal.checks import CheckResult, default_results
from tidemark.time.hours import Hour

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QualityOutcome:
    status: str  # passed | failed | empty
    policy: str
    failures: tuple[str, ...] = field(default_factory=tuple)
    evaluated: int = 0  # expectations run
    data_docs: str | None = None  # the hour's validation page, relative to the table's docs dir

    @property
    def blocks(self) -> bool:
        return bool(self.failures) and self.policy == "block"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def custom_specs(config: TableConfig, hour: Hour) -> list[tuple[str, dict[str, Any]]]:
    """(GX expectation type, kwargs) of the table's own expectations for an hour."""
    specs: list[tuple[str, dict[str, Any]]] = []
    for i, item in enumerate(config.quality.expectations):
        kind = item.get("type")
        if not isinstance(kind, str):
            raise ConfigError(config.table, [f"quality.expectations[{i}]: expected a 'type', got {item!r}"])
        kwargs = dict(item.get("kwargs") or {})
        absent = [c for c in expectation_columns(kwargs) if c not in config.expectation_columns]
        if absent:  # a column added after the schema version the hour was written with
            log.info(
                "%s hour %s: %s(%s) not applied: the hour's schema has no column %s",
                config.table,
                hour.key,
                kind,
                ", ".join(absent),
                ", ".join(absent),
            )
            continue
        specs.append((kind, kwargs))
    return specs


def _describe(kind: str, kwargs: dict[str, Any], result: dict[str, Any]) -> str:
    """One line per failed expectation: what, on which column, and a sample of what failed."""
    column = kwargs.get("column") or kwargs.get("column_list") or ""
    parts = [f"{kind}({column})" if column else kind]
    if result.get("unexpected_count") is not None:
        parts.append(f"{result['unexpected_count']} unexpected")
    sample = result.get("partial_unexpected_list")
    if sample:
        parts.append(f"e.g. {[str(v) for v in sample[:3]]}")
    if result.get("observed_value") is not None:
        parts.append(f"observed {result['observed_value']}")
    return ", ".join(parts)


def validate(
    config: TableConfig,
    hour: Hour,
    frame: DataFrame | None,
    docs_dir: Path | None = None,
    defaults: list[CheckResult] | None = None,
) -> tuple[bool, list[str], int, str | None]:
    """The hour's expectations on ``frame``: the defaults in one pass (``checks.py``; or
    ``defaults``, computed where the hour was compacted), the table's own with GX; (success,
    failure lines, count, the hour's Data Docs page, relative to ``docs_dir``, if its results
    were kept there). GX is not even imported for a table with only the defaults."""
    if defaults is None:
        assert frame is not None, "the defaults need the hour's rows"
        defaults = default_results(frame, config, hour)
    customs = custom_specs(config, hour)
    if customs:
        assert frame is not None, "the table's own expectations need the hour's rows"
    own = _run_gx(config, hour, frame, customs) if customs and frame is not None else []
    failures = [_describe(r.kind, r.kwargs, r.result) for r in defaults if not r.success]
    for r in own:
        if not r.success:
            expectation = r.expectation_config
            kind, kwargs = (expectation.type, dict(expectation.kwargs)) if expectation else ("unknown", {})
            failures.append(_describe(kind, kwargs, dict(r.result or {})))
    page = _record_docs(config, hour, defaults, own, docs_dir) if docs_dir is not None else None
    return not failures, failures, len(defaults) + len(customs), page


def needs_gx(config: TableConfig) -> bool:
    """Whether the gate of ``config`` imports GX: only for the table's own expectations (the
    Data Docs pages are rendered later, ``seal/data_docs.py``)."""
    return bool(config.quality.expectations)


def warm_gx() -> None:
    """Import GX ahead of its first use (``HourFiles.warm_up``)."""
    data_docs.gx_module()


def _run_gx(
    config: TableConfig, hour: Hour, frame: DataFrame, specs: list[tuple[str, dict[str, Any]]]
) -> list[Any]:
    """The table's own expectations, run by GX on the Spark frame: GX's results."""
    gx = data_docs.gx_module()
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    suite = context.suites.add(gx.ExpectationSuite(name=config.table))
    problems = []
    for i, (kind, kwargs) in enumerate(specs):
        try:
            suite.add_expectation_configuration(ExpectationConfiguration(type=kind, kwargs=kwargs))
        except Exception as exc:  # GX raises several types for unknown types and bad kwargs
            problems.append(f"quality expectation {i} {kind}{kwargs}: {str(exc).splitlines()[0]}")
    if problems:
        raise ConfigError(config.table, problems)
    suite.save()
    batch_definition = (
        context.data_sources.add_spark(name="tidemark")
        .add_dataframe_asset(name=config.table)
        .add_batch_definition_whole_dataframe("hour")
    )
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name=f"{config.table}.{hour.key}", data=batch_definition, suite=suite)
    )
    checkpoint = context.checkpoints.add(
        gx.Checkpoint(name=config.table, validation_definitions=[definition])
    )
    run = checkpoint.run(batch_parameters={"dataframe": frame}, run_id=RunIdentifier(run_name=hour.key))
    return list(next(iter(run.run_results.values())).results)


def _record_docs(
    config: TableConfig, hour: Hour, defaults: list[CheckResult], own: list[Any], docs_dir: Path
) -> str:
    """Keep the hour's results for its Data Docs page (rendered later, without this job);
    the page's path relative to ``docs_dir``."""
    results = [
        {"type": r.kind, "kwargs": r.kwargs, "success": r.success, "result": r.result} for r in defaults
    ]
    for r in own:
        expectation = r.expectation_config
        results.append(
            {
                "type": expectation.type if expectation else "unknown",
                "kwargs": dict(expectation.kwargs) if expectation else {},
                "success": bool(r.success),
                "result": dict(r.result or {}),
            }
        )
    return data_docs.record(docs_dir, config.table, hour.key, hour.start, results)


def gate(
    config: TableConfig,
    hour: Hour,
    frame: DataFrame | None,
    docs_dir: Path | None = None,
    *,
    defaults: list[CheckResult] | None = None,
) -> QualityOutcome:
    """Validate an hour's rows (``frame``; ``None`` and no ``defaults``: the hour was sealed
    empty, nothing to judge); with ``docs_dir``, also keep its results there for its GX Data
    Docs page."""
    policy = config.quality.policy
    if frame is None and defaults is None:
        return QualityOutcome(status="empty", policy=policy)
    success, failures, evaluated, page = validate(config, hour, frame, docs_dir, defaults)
    outcome = QualityOutcome(
        status="passed" if success else "failed",
        policy=policy,
        failures=tuple(failures),
        evaluated=evaluated,
        data_docs=page,
    )
    if failures:
        log.warning(
            "%s hour %s: %s of %s expectations failed (policy %s): %s",
            config.table,
            hour.key,
            len(failures),
            evaluated,
            policy,
            "; ".join(failures),
        )
    else:
        log.info("%s hour %s: %s expectations passed", config.table, hour.key, evaluated)
    return outcome
