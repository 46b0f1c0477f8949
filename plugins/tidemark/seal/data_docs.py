"""Each hour's Great Expectations Data Docs page, rendered off the seal's critical path.

The seal records an hour's expectation results as one JSON file (``results/<hour>.json``
under the table's docs dir; no GX import: a table with only the default checks never imports
GX in its seal) and names the page that will show them. The pages are rendered by GX later,
every pending hour in one site build: by ``tidemark report`` (and so ``tidemark docs``), and
by the Airflow plugin when a page that is asked for is not rendered yet. A page is pending
while it is missing or older than its hour's results (a rebuild or release judged the hour
again).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from tidemark.seal.docs_assets import install, localize

log = logging.getLogger(__name__)

DOCS_SITE = "tidemark"
RESULTS = "results"
# The batch identifier of every hour's validation: the last part of its page's name
BATCH = "hour"

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


def gx_module() -> Any:
    """Great Expectations, imported quietly (its import takes seconds: only when needed)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    quiet_gx_import_logs()
    import great_expectations as gx

    quiet_gx_import_logs()
    return gx


def page_of(table: str, hour_key: str, hour_start: datetime) -> str:
    """The hour's page, relative to the table's docs dir, where GX's site builder puts it:
    ``validations/<suite>/<run name>/<run time>/<batch>.html``."""
    run_time = hour_start.strftime("%Y%m%dT%H%M%S.%fZ")
    return f"validations/{table}/{hour_key}/{run_time}/{BATCH}.html"


def results_path(docs_dir: Path, hour_key: str) -> Path:
    return docs_dir / RESULTS / f"{hour_key}.json"


def record(
    docs_dir: Path,
    table: str,
    hour_key: str,
    hour_start: datetime,
    results: Iterable[Mapping[str, Any]],
) -> str:
    """Keep an hour's results (each ``{type, kwargs, success, result}``) for its page, written
    atomically (a retry rewrites the same file); the page's relative path."""
    target = results_path(docs_dir, hour_key)
    target.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "table": table,
        "hour": hour_key,
        "hour_start": hour_start.isoformat(),
        "results": [dict(r) for r in results],
    }
    scratch = target.with_name(f".{target.name}.{os.getpid()}")
    scratch.write_text(json.dumps(body, default=str, sort_keys=True))
    os.replace(scratch, target)
    return page_of(table, hour_key, hour_start)


def pending(docs_dir: Path) -> list[Path]:
    """The results files whose page is missing or older than them."""
    return [path for path, _ in _pending_results(docs_dir)]


def _pending_results(docs_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Each pending results file with its body (read once, for the check and the render)."""
    found = []
    for path in sorted((docs_dir / RESULTS).glob("*.json")):
        body = json.loads(path.read_text())
        page = docs_dir / _page(body)
        if not page.exists() or page.stat().st_mtime < path.stat().st_mtime:
            found.append((path, body))
    return found


def _page(body: dict[str, Any]) -> str:
    """The page of a results body."""
    return page_of(body["table"], body["hour"], datetime.fromisoformat(body["hour_start"]))


def render_pending(docs_dir: Path) -> list[str]:
    """Render every pending page of the table whose docs dir this is, in one GX site build;
    the pages written (relative paths). GX is imported only when a page is pending."""
    bodies = [body for _, body in _pending_results(docs_dir)]
    if not bodies:
        return []
    pages = _render(docs_dir, bodies)
    log.info("%s: %s Data Docs page(s) rendered into %s", bodies[0]["table"], len(pages), docs_dir)
    return pages


def _render(docs_dir: Path, bodies: list[dict[str, Any]]) -> list[str]:
    """The pages of ``bodies`` (one table's), rendered by GX into a scratch site, then copied
    into ``docs_dir`` (GX's site builder removes pages its ephemeral store does not know)."""
    gx = gx_module()
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
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
        for body in bodies:
            run_id = RunIdentifier(run_name=body["hour"], run_time=datetime.fromisoformat(body["hour_start"]))
            key = ValidationResultIdentifier(ExpectationSuiteIdentifier(body["table"]), run_id, BATCH)
            context.validation_results_store.set(key, _suite_result(body, run_id))
        context.build_data_docs(site_names=[DOCS_SITE])
        pages = [_keep_page(scratch, docs_dir, body) for body in bodies]
        install(docs_dir)  # the pages' CSS, JS and fonts beside them: no CDN (docs_assets)
        return pages
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _suite_result(body: dict[str, Any], run_id: Any) -> Any:
    """GX's validation result of one hour, from its recorded results."""
    from great_expectations.core import ExpectationSuiteValidationResult, ExpectationValidationResult
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    results = [
        ExpectationValidationResult(
            success=r["success"],
            expectation_config=ExpectationConfiguration(type=r["type"], kwargs=r["kwargs"]),
            result=r["result"],
        )
        for r in body["results"]
    ]
    passed = sum(1 for r in results if r.success)
    return ExpectationSuiteValidationResult(
        success=passed == len(results),
        results=results,
        suite_name=body["table"],
        statistics={
            "evaluated_expectations": len(results),
            "successful_expectations": passed,
            "unsuccessful_expectations": len(results) - passed,
            "success_percent": 100.0 * passed / len(results) if results else 100.0,
        },
        meta={"run_id": run_id, "active_batch_definition": {"table": body["table"], "hour": body["hour"]}},
    )


def _keep_page(scratch: Path, docs_dir: Path, body: dict[str, Any]) -> str:
    """Copy one hour's page (and the shared static assets, once) into ``docs_dir``, keeping
    GX's relative layout so the page's links work, its CDN addresses made local
    (``docs_assets.localize``); each file replaced atomically (a reader or a second render never
    sees half a page)."""
    if not (docs_dir / "static").exists() and (scratch / "static").exists():
        assets = Path(tempfile.mkdtemp(prefix=".static-", dir=docs_dir))
        shutil.copytree(scratch / "static", assets, dirs_exist_ok=True)
        try:
            os.rename(assets, docs_dir / "static")
        except OSError:  # a second render put them there first
            shutil.rmtree(assets, ignore_errors=True)
    relative = _page(body)
    source, target = scratch / relative, docs_dir / relative
    if not source.is_file():
        raise FileNotFoundError(f"GX rendered no page {relative} for {body['table']} hour {body['hour']}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    partial.write_text(localize(source.read_text(), depth=len(Path(relative).parts) - 1))
    os.replace(partial, target)
    return relative
