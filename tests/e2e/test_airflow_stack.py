"""`make up` / `make down`: Airflow standalone answers on loopback, the printed password logs in,
the metastore pool and Spark connection exist, the tidemark plugin serves its health pages, and
stopping leaves no process of ours."""

from __future__ import annotations

import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.airflow_api import api
from tests.helpers.net import free_port
from tidemark.settings import Settings
from tidemark_dev.airflow_env import HIVE_METASTORE_POOL, admin_password
from tidemark_dev.services import AirflowService

pytestmark = pytest.mark.e2e


def page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        return str(response.read().decode())


def test_airflow_standalone_up_login_and_clean_down(tmp_path: Path, settings: Settings) -> None:
    service = AirflowService(replace(settings, home=tmp_path, airflow_port=free_port()))
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
        index = page(f"{base}/tidemark/")
        assert 'href="tables/events/health"' in index and 'href="tables/orders/health"' in index
        health = page(f"{base}/tidemark/tables/events/health")
        assert "Ingestion health: events" in health and health.count('class="plot"') == 4
        for kind in ("ingest", "seal", "rebuild"):
            assert "Ingestion health: events" in page(f"{base}/tidemark/dags/tidemark_{kind}_events/health")
        root = psutil.Process(status.pid)
        family = [root, *root.children(recursive=True)]
        assert len(family) >= 4  # scheduler, dag-processor, api-server, triggerer
    finally:
        service.stop()
    alive = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"processes left behind: {alive}"
    assert not service.status().running
