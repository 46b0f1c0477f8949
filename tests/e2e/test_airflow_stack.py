"""`make up` / `make down`: Airflow standalone answers on loopback, the printed password logs in,
the metastore pool and Spark connection exist, the tidemark plugin serves its health pages, and
stopping leaves no process of ours."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.airflow_api import api
from tests.helpers.tables import ROOT
from tests.helpers.timeouts import HEAVY
from tidemark.seal.data_docs import record
from tidemark.settings import Settings
from tidemark.state.layout import data_docs_dir
from tidemark_dev.airflow_env import HIVE_METASTORE_POOL, admin_password, airflow_environment
from tidemark_dev.net import free_port
from tidemark_dev.services import AirflowService

pytestmark = pytest.mark.e2e


def page(url: str, token: str, timeout: float = 30) -> str:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert response.status == 200
        return str(response.read().decode())


def refused(url: str, token: str | None = None, accept: str = "application/json") -> tuple[int, str]:
    """(HTTP status, final URL) of a request the plugin must not answer with the page."""
    headers = {"Accept": accept, **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            body = response.read().decode()
            assert "Ingestion health" not in body and "tidemark tables" not in body, url
            return response.status, response.url
    except urllib.error.HTTPError as exc:
        return exc.code, url


@HEAVY
def test_airflow_standalone_up_login_and_clean_down(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a second user, who may read only the events table's DAGs where the auth manager has
    # DAG-level permissions (tests/helpers/auth_manager.py; `airflow standalone` forces
    # SimpleAuthManager, so a second API server of the same stack runs with it)
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,viewer:viewer")
    # the project's tables and, beside them, one YAML that cannot load: every other page works
    conf_dir = tmp_path / "conf"
    shutil.copytree(settings.conf_dir, conf_dir)
    (conf_dir / "broken.yaml").write_text(
        "table: broken\nsource: {topic: broken, max_records_per_partition: -1}\n"
    )
    service = AirflowService(replace(settings, home=tmp_path, airflow_port=free_port(), conf_dir=conf_dir))
    family: list[psutil.Process] = []
    try:
        status = service.start()
        assert status.answering and status.pid
        base = service.address()
        assert base.startswith("http://127.0.0.1:")
        password = admin_password(service.settings)
        assert password, "SimpleAuthManager did not write the admin password"
        assert password in service.login_hint()
        token = str(
            api(f"{base}/auth/token", body={"username": "admin", "password": password})["access_token"]
        )
        pools: list[dict[str, object]] = api(f"{base}/api/v2/pools", token)["pools"]
        metastore_pool = next(p for p in pools if p["name"] == HIVE_METASTORE_POOL)
        assert metastore_pool["slots"] == 1
        connection = api(f"{base}/api/v2/connections/spark_default", token)
        assert connection["conn_type"] == "spark" and connection["host"] == settings.spark_master
        # The tidemark plugin: registered, linked from the UI, pages served by the API server.
        plugins: list[dict[str, Any]] = api(f"{base}/api/v2/plugins", token)["plugins"]
        plugin = next(p for p in plugins if p["name"] == "tidemark")
        views = {(v["destination"], v["href"]) for v in plugin["external_views"]}
        assert views == {("nav", "tidemark/"), ("dag", "tidemark/dags/{DAG_ID}/health")}
        index = page(f"{base}/tidemark/", token)
        assert 'href="tables/events/health"' in index and 'href="tables/orders/health"' in index
        assert "cannot run" in index and "broken.yaml" in index and "max_records_per_partition" in index
        with pytest.raises(urllib.error.HTTPError) as missing:
            page(f"{base}/tidemark/tables/broken/health", token)
        assert missing.value.code == 404 and "cannot load" in missing.value.read().decode()
        # an hour's Data Docs page, kept by a seal and rendered on its first request
        hour_page = record(
            data_docs_dir(service.settings.state_dir, "events"),
            "events",
            "2026-11-22T10",
            datetime(2026, 11, 22, 10, tzinfo=UTC),
            [{"type": "expect_column_values_to_be_unique", "kwargs": {"column": "event_id"},
              "success": False, "result": {"unexpected_count": 2, "partial_unexpected_list": ["e-7"]}}],
        )  # fmt: skip
        # the first Data Docs request imports Great Expectations and builds the site (~5 s
        # alone; over 30 s measured on 2 cores beside the suite's heaviest module)
        rendered = page(f"{base}/tidemark/tables/events/docs/{hour_page}", token, timeout=180)
        assert "event_id" in rendered and "e-7" in rendered
        health = page(f"{base}/tidemark/tables/events/health", token)
        assert "Ingestion health: events" in health and health.count('class="plot"') == 5
        for kind in ("ingest", "seal", "rebuild"):
            assert "Ingestion health: events" in page(
                f"{base}/tidemark/dags/tidemark_{kind}_events/health", token
            )
        # behind the login: anonymous requests get 401, an anonymous browser the login page
        for path in (
            "",
            "tables/events/health",
            "dags/tidemark_ingest_events/health",
            "tables/events/docs/index.html",
        ):
            assert refused(f"{base}/tidemark/{path}") == (401, f"{base}/tidemark/{path}"), path
        status_code, landed_on = refused(f"{base}/tidemark/tables/events/health", accept="text/html")
        assert status_code == 200 and "/auth/login" in landed_on, landed_on
        # a user without access to a table's DAGs: 403 for that table, its Data Docs included
        with scoped_api_server(service.settings) as scoped:
            viewer = str(
                api(
                    f"{scoped}/auth/token",
                    body={"username": "viewer", "password": user_password(service, "viewer")},
                )["access_token"]
            )
            assert "Ingestion health: events" in page(f"{scoped}/tidemark/tables/events/health", viewer)
            listed = page(f"{scoped}/tidemark/", viewer)
            assert 'href="tables/events/health"' in listed and "orders" not in listed
            for path in (
                "tables/orders/health",
                "dags/tidemark_seal_orders/health",
                "tables/orders/docs/index.html",
            ):
                assert refused(f"{scoped}/tidemark/{path}", viewer)[0] == 403, path
        wait_for_parsed_dags(base, token, "tidemark_ingest_events", "tidemark_bootstrap_orders")
        see_the_ui(base, password, tmp_path / "screenshots")
        root = psutil.Process(status.pid)
        family = [root, *root.children(recursive=True)]
        assert len(family) >= 4  # scheduler, dag-processor, api-server, triggerer
    finally:
        service.stop()
    alive = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"processes left behind: {alive}"
    assert not service.status().running


def wait_for_parsed_dags(base: str, token: str, *dag_ids: str, timeout: float = 240.0) -> None:
    """The DAG processor parses the DAG folder in its own time after the API server answers (a
    minute or more on a loaded machine): the UI lists a DAG only once it is serialized."""
    deadline = time.monotonic() + timeout
    listed: set[str] = set()
    while time.monotonic() < deadline:
        dags = api(f"{base}/api/v2/dags?tags=tidemark&limit=100", token)["dags"]
        listed = {str(d["dag_id"]) for d in dags}
        if set(dag_ids) <= listed:
            return
        time.sleep(2)
    raise AssertionError(f"the DAG processor did not list {sorted(set(dag_ids) - listed)} in {timeout} s")


def see_the_ui(base: str, password: str, shots: Path) -> None:
    """The UI as a user sees it, in Debian's headless Chromium driven by Playwright: the login
    form, the DAG list with the tidemark tags, the ingest DAG's trigger form with its typed
    params, and the health page through the plugin. A screenshot of each lands in ``shots``;
    the checks read the rendered page text, and no page shows an error banner."""

    from playwright.sync_api import expect, sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: `make test` installs it (scripts/ensure_chromium.sh)"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=chromium,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(60_000)
            # a loaded machine answers the DAG list's query in seconds, not the 5 s assertions wait
            expect.set_options(timeout=60_000)

            def show(name: str) -> str:
                page.wait_for_load_state("networkidle")
                page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
                text = page.inner_text("body")
                for banner in ("Internal Server Error", "Something went wrong", "Traceback", "Error loading"):
                    assert banner not in text, f"{name}: {banner!r} on {page.url}"
                return text

            page.goto(f"{base}/")
            page.locator("input[name=username]").fill("admin")
            page.locator("input[name=password]").fill(password)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(lambda url: "/auth/login" not in url)

            page.goto(f"{base}/dags?tags=tidemark")
            expect(page.get_by_text("tidemark_ingest_events", exact=True)).to_be_visible()
            dags = show("dag-list")
            for dag_id in ("tidemark_ingest_events", "tidemark_seal_orders", "tidemark_merge_orders"):
                assert dag_id in dags, dag_id
            for tag in ("tidemark", "ingest", "clickstream"):
                assert tag in dags, tag

            def trigger_form(dag_id: str) -> Any:
                page.goto(f"{base}/dags/{dag_id}")
                page.get_by_role("button", name="Trigger").first.click()
                dialog = page.get_by_role("dialog")
                expect(dialog).to_be_visible()
                return dialog

            dialog = trigger_form("tidemark_ingest_events")
            form = show("trigger-form")
            for title in ("Dry run", "Resolve a stuck batch", "Replay dirty records", "Reason"):
                assert title in form, title
            assert dialog.get_by_role("switch").or_(dialog.get_by_role("checkbox")).count() >= 1  # boolean
            assert dialog.get_by_role("combobox").count() >= 1  # the enum of decisions
            assert "(none)" in form and "null" not in form  # the empty decision, named
            # the defaults are a valid run: nothing to fill in before "Trigger" (null, not "")
            submit = dialog.get_by_test_id("trigger-dag-submit")
            expect(submit).to_be_enabled(timeout=10_000)
            for dag_id in ("tidemark_seal_events", "tidemark_rebuild_events", "tidemark_merge_orders"):
                expect(trigger_form(dag_id).get_by_test_id("trigger-dag-submit")).to_be_enabled(
                    timeout=10_000
                )
            # the bootstrap needs its source: Trigger waits for it
            dialog = trigger_form("tidemark_bootstrap_orders")
            submit = dialog.get_by_test_id("trigger-dag-submit")
            expect(submit).to_be_disabled(timeout=10_000)
            dialog.locator("[name=element_source]").fill("jdbc:postgresql://db:5432/shop")
            expect(submit).to_be_enabled(timeout=10_000)

            page.goto(f"{base}/tidemark/")  # the broken file named, every table listed
            expect(page.locator("#broken")).to_contain_text("broken.yaml")
            expect(page.locator("#tables")).to_contain_text("orders")
            page.get_by_role("link", name="events").click()
            health = show("health")
            assert "Ingestion health: events" in health and "Freshness" in health
            # a logged-out browser (no cookie) gets the login page, not the health page
            anonymous = browser.new_context().new_page()
            anonymous.goto(f"{base}/tidemark/tables/events/health")
            anonymous.wait_for_url(lambda url: "/auth/login" in url)
            assert "Ingestion health" not in anonymous.inner_text("body")
        finally:
            browser.close()
    assert sorted(p.name for p in shots.iterdir()) == ["dag-list.png", "health.png", "trigger-form.png"]


def user_password(service: AirflowService, user: str) -> str:
    """A password SimpleAuthManager generated for ``user`` (beside the admin's)."""
    path = service.settings.airflow_home / "simple_auth_manager_passwords.json.generated"
    return str(json.loads(path.read_text())[user])


@contextmanager
def scoped_api_server(settings: Settings) -> Iterator[str]:
    """A second API server of the same Airflow home and database whose auth manager has
    DAG-level permissions (the stand-in); yields its base URL."""

    own = replace(settings, airflow_port=free_port())
    env = {
        **airflow_environment(own),
        "AIRFLOW__CORE__AUTH_MANAGER": "tests.helpers.auth_manager.OneTableViewer",
        "TIDEMARK_TEST_VIEWER_TABLE": "events",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    airflow = str(Path(settings.python).parent / "airflow")
    log = (settings.home / "scoped-api-server.log").open("wb")
    server = subprocess.Popen([airflow, "api-server"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{own.airflow_port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/v2/version", timeout=5).close()
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, f"the API server exited: see {log.name}"
                assert time.monotonic() < deadline, f"the API server did not answer in 120 s: see {log.name}"
                time.sleep(1)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
