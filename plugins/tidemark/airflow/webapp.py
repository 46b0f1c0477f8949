"""The health pages inside Airflow: a FastAPI app the Airflow 3 plugin mounts on the API server
(``/tidemark``), linked from the UI's navigation and from every tidemark DAG.

Pages are rendered on request from the state store, so they are always current:

- ``/tidemark/``: the tables, with links;
- ``/tidemark/tables/<table>/health``: the table's health page (``tidemark report``);
- ``/tidemark/dags/<dag id>/health``: the same, reached from a DAG's page;
- ``/tidemark/tables/<table>/docs/<path>``: the hour's GX Data Docs pages.

The pages show counts and quality results, never data rows or secrets.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from tidemark.airflow.common import table_of_dag
from tidemark.config import load_tables
from tidemark.errors import ConfigError
from tidemark.observe.report import render_report, report_data
from tidemark.settings import Settings
from tidemark.state.layout import data_docs_dir

URL_PREFIX = "/tidemark"


def create_app(settings: Settings | None = None) -> Any:
    from fastapi import FastAPI, HTTPException
    from fastapi.responses import FileResponse, HTMLResponse

    app = FastAPI(title="tidemark health", docs_url=None, redoc_url=None)

    def current() -> Settings:
        return settings or Settings.from_env()

    def table_config(name: str) -> Any:
        tables = {c.table: c for c in load_tables(current())}
        if name not in tables:
            raise HTTPException(status_code=404, detail=f"no table {name!r} in {current().conf_dir}")
        return tables[name]

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        try:
            tables = sorted(c.table for c in load_tables(current()))
        except ConfigError as exc:
            return f"<pre>{html.escape(str(exc))}</pre>"
        items = "".join(
            f'<li><a href="tables/{html.escape(t)}/health">{html.escape(t)}</a></li>' for t in tables
        )
        return f"<!doctype html><title>tidemark</title><h1>tidemark tables</h1><ul id='tables'>{items}</ul>"

    @app.get("/tables/{table}/health", response_class=HTMLResponse)
    def health(table: str) -> str:
        config = table_config(table)
        return render_report(report_data(config, current()), docs_prefix="docs/")

    @app.get("/dags/{dag_id}/health", response_class=HTMLResponse)
    def dag_health(dag_id: str) -> str:
        config = table_config(table_of_dag(dag_id) or dag_id)
        return render_report(report_data(config, current()), docs_prefix=f"../../tables/{config.table}/docs/")

    @app.get("/tables/{table}/docs/{path:path}")
    def docs(table: str, path: str) -> Any:
        config = table_config(table)
        root = data_docs_dir(current().state_dir, config.table).resolve()
        target = (root / path).resolve()
        if not target.is_relative_to(root) or not target.is_file():
            raise HTTPException(status_code=404, detail="no such Data Docs page")
        return FileResponse(Path(target))

    return app
