"""Running a tidemark DAG in-process (``dag.test()``) and reading the asset events it emitted."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any


def run_dag(dag_id: str, when: datetime, conf: dict[str, Any] | None = None) -> dict[str, str]:
    """One run of ``dag_id`` (built from the DAGs folder) at ``when``; task id -> state."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).get_dag(dag_id)
    assert dag is not None, dag_id
    run = dag.test(logical_date=when, run_after=when, run_conf=conf)
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


def asset_events(dag_id: str) -> list[Any]:
    """(partition key, announced version) of each asset event ``dag_id`` emitted."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        events = session.query(AssetEvent).filter(AssetEvent.source_dag_id == dag_id).all()
        return [(e.partition_key, e.extra.get("versions", {}).get(e.partition_key)) for e in events]


def extra_links(dag_id: str, run_id: str) -> dict[tuple[str, str], str]:
    """(task id, link name) -> URL of each operator extra link the run's tasks recorded (Airflow 3
    computes them in the worker when a task ends and keeps them as ``_link_<class>`` XComs)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows: list[Any] = list(session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_id)).all())
        return {
            (row.task_id, row.key.removeprefix("_link_")): XComModel.deserialize_value(row)
            for row in rows
            if row.key.startswith("_link_")
        }


def core_api(user: str) -> Any:
    """Airflow's public REST API (what the UI calls), in process on this metadata DB, as ``user``
    (a SimpleAuthManager admin)."""
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    client = TestClient(create_app(apps="core"))
    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username=user, role="admin"))
    client.headers["Authorization"] = f"Bearer {token}"
    return client
