"""The quality gate run on an hour before it is registered: the default expectations in one
Spark pass (``checks.py``), the table's own with Great Expectations 1.x on the hour's rows in
Spark, and one GX Data Docs page per hour with both.

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
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig, expectation_columns
from tidemark.errors import ConfigError
from tidemark.seal.checks import CheckResult, default_results
from tidemark.time.hours import Hour

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

DOCS_SITE = "tidemark"


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


# GX logs dozens of INFO lines about its own start-up in every task ("Skipping registering
# function ...", "Multiple declarations of metric ..."); its warnings still come through.
GX_STARTUP_LOGGERS = (
    "great_expectations._docs_decorators",
    "great_expectations.expectations.registry",
    "great_expectations.data_context.types.base",
    "great_expectations.datasource.fluent.config",
)


def quiet_gx_import_logs() -> None:
    """Before importing GX, and after (one of its modules forces INFO on itself at import)."""
    for name in GX_STARTUP_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level in (logging.NOTSET, logging.INFO):  # a level the user configured wins
            logger.setLevel(logging.WARNING)


def validate(
    config: TableConfig,
    hour: Hour,
    frame: DataFrame | None,
    docs_dir: Path | None = None,
    defaults: list[CheckResult] | None = None,
) -> tuple[bool, list[str], int, str | None]:
    """The hour's expectations on ``frame``: the defaults in one pass (``checks.py``; or
    ``defaults``, computed where the hour was compacted), the table's own with GX; (success,
    failure lines, count, the hour's Data Docs page, relative to ``docs_dir``, if one was
    written). GX is not even imported for a table with only the defaults and no docs to
    write."""
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
    page = _write_docs(config, hour, defaults, own, docs_dir) if docs_dir is not None else None
    return not failures, failures, len(defaults) + len(customs), page


def needs_gx(config: TableConfig, docs_dir: Path | None) -> bool:
    """Whether the gate of ``config`` imports GX: for the table's own expectations, or to
    render the Data Docs."""
    return bool(config.quality.expectations) or docs_dir is not None


def warm_gx() -> None:
    """Import GX ahead of its first use (``HourFiles.warm_up``)."""
    _gx()


def _gx() -> Any:
    """Great Expectations, imported quietly (its import takes seconds: only when needed)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    quiet_gx_import_logs()
    import great_expectations as gx

    quiet_gx_import_logs()
    return gx


def _run_gx(
    config: TableConfig, hour: Hour, frame: DataFrame, specs: list[tuple[str, dict[str, Any]]]
) -> list[Any]:
    """The table's own expectations, run by GX on the Spark frame: GX's results."""
    gx = _gx()
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


def _write_docs(
    config: TableConfig, hour: Hour, defaults: list[CheckResult], own: list[Any], docs_dir: Path
) -> str | None:
    """The hour's Data Docs page, rendered by GX from every result (the defaults' as GX
    results), into a scratch site whose page is then copied into the table's docs dir (GX's
    site builder removes pages its ephemeral store does not know)."""
    gx = _gx()
    from great_expectations.core import ExpectationSuiteValidationResult, ExpectationValidationResult
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    results = [
        ExpectationValidationResult(
            success=r.success,
            expectation_config=ExpectationConfiguration(type=r.kind, kwargs=r.kwargs),
            result=r.result,
        )
        for r in defaults
    ] + own
    passed = sum(1 for r in results if r.success)
    run_id = RunIdentifier(run_name=hour.key, run_time=hour.start)
    validation = ExpectationSuiteValidationResult(
        success=passed == len(results),
        results=results,
        suite_name=config.table,
        statistics={
            "evaluated_expectations": len(results),
            "successful_expectations": passed,
            "unsuccessful_expectations": len(results) - passed,
            "success_percent": 100.0 * passed / len(results) if results else 100.0,
        },
        meta={"run_id": run_id, "active_batch_definition": {"table": config.table, "hour": hour.key}},
    )
    scratch = Path(tempfile.mkdtemp(prefix="tidemark-gx-docs-"))
    try:
        context = gx.get_context(mode="ephemeral")
        site: Any = {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(scratch)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
        context.add_data_docs_site(site_name=DOCS_SITE, site_config=site)
        key = ValidationResultIdentifier(ExpectationSuiteIdentifier(config.table), run_id, "hour")
        context.validation_results_store.set(key, validation)
        context.build_data_docs(site_names=[DOCS_SITE])
        return _keep_pages(scratch, docs_dir, config.table, hour)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _keep_pages(scratch: Path, docs_dir: Path, table: str, hour: Hour) -> str | None:
    """Copy the hour's validation page (and the shared static assets, once) into ``docs_dir``,
    keeping GX's relative layout so the page's links work; return its relative path."""
    if not (docs_dir / "static").exists() and (scratch / "static").exists():
        shutil.copytree(scratch / "static", docs_dir / "static")
    page = None
    for source in sorted(scratch.glob(f"validations/{table}/{hour.key}/*/*.html")):
        relative = source.relative_to(scratch)
        (docs_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, docs_dir / relative)
        page = str(relative)
    return page


def gate(
    config: TableConfig,
    hour: Hour,
    frame: DataFrame | None,
    docs_dir: Path | None = None,
    *,
    defaults: list[CheckResult] | None = None,
) -> QualityOutcome:
    """Validate an hour's rows (``frame``; ``None`` and no ``defaults``: the hour was sealed
    empty, nothing to judge); with ``docs_dir``, also render its GX Data Docs page there."""
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
