"""The health pages inside Airflow: a FastAPI app the Airflow 3 plugin mounts on the API server
(``/tidemark``), linked from the UI's navigation and from every tidemark DAG.

Pages are rendered on request from the state store, so they are always current:

- ``/tidemark/``: the tables, with links;
- ``/tidemark/tables/<table>/health``: the table's health page (``tidemark report``);
- ``/tidemark/dags/<dag id>/health``: the same, reached from a DAG's page;
- ``/tidemark/tables/<table>/docs/<path>``: the hour's GX Data Docs pages (a page not yet
  rendered is rendered on its first request, with every other pending one).

Every route is behind Airflow's login, through the API server's auth manager (the same JWT
the UI holds in its cookie, or an ``Authorization: Bearer`` token): an anonymous browser is sent
to the login page, any other anonymous request gets 401. A table's pages, its Data Docs
included (which can list unexpected values, i.e. data), need read access to the table's ingest
DAG (and, reached from a DAG, to that DAG): 403 otherwise; the index lists only those tables.
The pages show counts and quality results, never secrets.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request  # noqa: TID253

from tidemark.airflow.dag_ids import dag_id_of, table_of_dag
from tidemark.catalog import table_configs
from tidemark.observe.report import render_report, report_data
from tidemark.seal.data_docs import render_pending
from tidemark.settings import Settings
from tidemark.state.layout import data_docs_dir

URL_PREFIX = "/tidemark"


class _LoginRequired(Exception):
    """An anonymous browser: sent to Airflow's login page, then back."""


async def _viewer(request: Request) -> Any:
    """The Airflow user of the request (the UI's cookie or a bearer token), by the API server's
    own rule; 401, or the login page for a browser, when there is none."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import HTTPException
    from fastapi.security import HTTPAuthorizationCredentials
    from fastapi.security.utils import get_authorization_scheme_param

    scheme, token = get_authorization_scheme_param(request.headers.get("Authorization"))
    bearer = HTTPAuthorizationCredentials(scheme=scheme, credentials=token) if scheme and token else None
    try:
        return await get_user(request, None, bearer)
    except HTTPException as exc:
        if exc.status_code == 401 and "text/html" in request.headers.get("accept", ""):
            raise _LoginRequired from exc
        raise


Viewer = Annotated[Any, Depends(_viewer)]


def may_read(user: Any, dag_ids: list[str]) -> bool:
    """Whether the auth manager lets ``user`` read every one of ``dag_ids``."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    manager = get_auth_manager()
    return all(manager.is_authorized_dag(method="GET", details=DagDetails(id=d), user=user) for d in dag_ids)


def _tables_apart(settings: Settings) -> tuple[dict[str, Any], dict[str, str]]:
    """Every table whose config loads, and each file that does not (where -> why): each file
    on its own, as the DAG files load them, so one broken YAML takes no other page."""
    configs, broken = table_configs(settings)
    return {c.table: c for c in configs}, broken


def _readable(settings: Settings, user: Any, name: str, *dag_ids: str) -> Any:
    """The table's config, if ``user`` may read its DAGs: 404 for no such table (or one whose
    config cannot load, with why), else 403."""
    from fastapi import HTTPException

    tables, broken = _tables_apart(settings)
    if name not in tables:
        why = next((problem for where, problem in broken.items() if Path(where).stem == name), "")
        detail = f"table {name!r} cannot load: {why}" if why else f"no table {name!r} in {settings.conf_dir}"
        raise HTTPException(status_code=404, detail=detail)
    if not may_read(user, [dag_id_of("ingest", name), *dag_ids]):
        raise HTTPException(status_code=403, detail=f"no read access to the DAGs of table {name!r}")
    return tables[name]


def _index_page(settings: Settings, user: Any) -> str:
    """The tables ``user`` may read, and the table files that cannot run."""
    tables, broken = _tables_apart(settings)
    items = "".join(
        f'<li><a href="tables/{html.escape(t)}/health">{html.escape(t)}</a></li>'
        for t in sorted(tables)
        if may_read(user, [dag_id_of("ingest", t)])
    )
    problems = "".join(
        f"<li><b>{html.escape(where)}</b><pre>{html.escape(why)}</pre></li>"
        for where, why in sorted(broken.items())
    )
    head = (
        f"<section id='broken'><h2>Table files that cannot run</h2><p>Their tables have no DAGs until the "
        f"file is fixed; every other table runs.</p><ul>{problems}</ul></section>"
        if broken
        else ""
    )
    return f"<!doctype html><title>tidemark</title><h1>tidemark tables</h1>{head}<ul id='tables'>{items}</ul>"


def _docs_file(settings: Settings, table: str, path: str) -> Path:
    """A Data Docs page of ``table`` (rendered first when an hour sealed since); 404 outside."""
    from fastapi import HTTPException

    root = data_docs_dir(settings.state_dir, table).resolve()
    target = (root / path).resolve()
    if target.is_relative_to(root) and not target.is_file() and target.suffix == ".html":
        render_pending(root)  # an hour sealed since the last render: every pending page at once
    if not target.is_relative_to(root) or not target.is_file():
        raise HTTPException(status_code=404, detail="no such Data Docs page")
    return Path(target)


def create_app(settings: Settings | None = None) -> Any:
    from fastapi import FastAPI
    from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

    app = FastAPI(title="tidemark health", docs_url=None, redoc_url=None)

    @app.exception_handler(_LoginRequired)
    async def to_login(request: Request, _: _LoginRequired) -> RedirectResponse:
        from airflow.api_fastapi.app import get_auth_manager

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)

    def current() -> Settings:
        return settings or Settings.from_env()

    @app.get("/", response_class=HTMLResponse)
    def index(user: Viewer) -> str:
        return _index_page(current(), user)

    @app.get("/tables/{table}/health", response_class=HTMLResponse)
    def health(table: str, user: Viewer) -> str:
        config = _readable(current(), user, table)
        return render_report(report_data(config, current()), docs_prefix="docs/")

    @app.get("/dags/{dag_id}/health", response_class=HTMLResponse)
    def dag_health(dag_id: str, user: Viewer) -> str:
        config = _readable(current(), user, table_of_dag(dag_id) or dag_id, dag_id)
        return render_report(report_data(config, current()), docs_prefix=f"../../tables/{config.table}/docs/")

    @app.get("/tables/{table}/docs/{path:path}")
    def docs(table: str, path: str, user: Viewer) -> Any:
        config = _readable(current(), user, table)
        return FileResponse(_docs_file(current(), config.table, path))

    return app
