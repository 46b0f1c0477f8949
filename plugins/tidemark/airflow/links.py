"""Extra links on tidemark's task instances (Airflow's operator extra links): from a dump task to
its batch's row on the table's health page, from a seal or rebuild task to the Data Docs of
the newest hour it wrote. Airflow 3 asks for them in the worker when the task ends and keeps
them as XCom; the UI shows them on the task instance."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink  # noqa: TID253

from tidemark.airflow.webapp import URL_PREFIX
from tidemark.observe.batch_table import run_anchor
from tidemark.table import Table


def _base_url() -> str:
    """The API server's base URL (``[api] base_url``), or none: a link from the site's root."""
    from airflow.configuration import conf

    return str(conf.get("api", "base_url", fallback="") or "").rstrip("/")


def _table(operator: Any) -> str | None:
    tables = operator.lineage_of()[1] if hasattr(operator, "lineage_of") else []
    return tables[0] if tables else None


def table_url(table: str, page: str) -> str:
    """A page of the table's health pages (``health``, ``docs/<path>``) as the UI links it."""
    return f"{_base_url()}{URL_PREFIX}/tables/{table}/{page}"


def health_url(table: str, anchor: str = "") -> str:
    return table_url(table, "health") + (f"#{anchor}" if anchor else "")


class BatchReconciliationLink(BaseOperatorLink):
    """The run's batch on the health page: read == rows + dirty + tombstones + late per MQ partition."""

    name = "Batch reconciliation"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        table = _table(operator)
        return health_url(table, run_anchor(ti_key.run_id)) if table else ""


class HourDataDocsLink(BaseOperatorLink):
    """The Data Docs of the newest hour this run sealed or rebuilt; the hours table otherwise."""

    name = "Data Docs"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from tidemark.settings import Settings

        table = _table(operator)
        if not table:
            return ""
        settings = Settings.from_env()
        journal = Table.state_of(settings.state_location, table).journal.state()
        written = sorted(
            (e for e in journal.hours.values() if e.run_id == ti_key.run_id and e.quality.get("data_docs")),
            key=lambda e: e.hour_start,
        )
        if not written:
            return health_url(table, "hours")
        return table_url(table, f"docs/{written[-1].quality['data_docs']}")
