"""Airflow 3 plugin: serves tidemark's health pages from the API server and links them from the
UI (a navigation entry, a tab on every tidemark DAG, and extra links on the dump, seal and
rebuild task instances, a note on each rebuild run). The pages render on request from the
state store; see tidemark/webapp.py."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin  # noqa: TID253

from tidemark.airflow import run_notes
from tidemark.airflow.links import BatchReconciliationLink, HourDataDocsLink
from tidemark.airflow.webapp import URL_PREFIX, create_app


class TidemarkPlugin(AirflowPlugin):
    name = "tidemark"
    listeners = [run_notes]  # a note on each rebuild run naming its hours
    operator_extra_links = [BatchReconciliationLink(), HourDataDocsLink()]
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "tidemark health pages"}]
    external_views = [
        {
            "name": "Ingestion health",
            "href": "tidemark/",  # relative: works behind a proxy prefix
            "destination": "nav",
            "category": "browse",
            "url_route": "tidemark_health",
        },
        {
            "name": "Ingestion health",
            "href": "tidemark/dags/{DAG_ID}/health",
            "destination": "dag",
            "url_route": "tidemark_dag_health",
        },
    ]
