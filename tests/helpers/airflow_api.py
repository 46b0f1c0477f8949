"""A minimal client of Airflow 3's REST API for end-to-end tests: a JWT from /auth/token, then
JSON requests; waits that poll with a deadline and say what they were waiting for."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


def api(
    url: str, token: str | None = None, body: dict[str, Any] | None = None, method: str | None = None
) -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, headers=headers, method=method or ("POST" if body else "GET")
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        raise AssertionError(
            f"{request.method} {url}: HTTP {exc.code}: {exc.read().decode()[:500]}"
        ) from None


class AirflowApi:
    def __init__(self, base: str, password: str) -> None:
        self.base = base
        self.token = str(
            api(f"{base}/auth/token", body={"username": "admin", "password": password})["access_token"]
        )

    def get(self, path: str) -> Any:
        return api(f"{self.base}/api/v2/{path}", self.token)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return api(f"{self.base}/api/v2/{path}", self.token, body)

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        return api(f"{self.base}/api/v2/{path}", self.token, body, method="PATCH")

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.get(f"dags/{dag_id}/dagRuns/{run_id}")["state"])

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        instances = self.get(f"dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return {ti["task_id"]: ti["state"] for ti in instances}


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 3.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
