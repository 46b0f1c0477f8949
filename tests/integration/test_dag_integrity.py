"""DAG integrity (astro-cli template): every file in dags/ imports without errors, touches no
database and looks up no connection or variable at parse time, and every DAG has retries,
tags and docs."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

pytestmark = pytest.mark.integration

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import BaseHook, Variable

    queries: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        queries.append(statement)

    forbidden = mock.Mock(side_effect=AssertionError("connection/variable lookup at parse time"))
    event.listen(Engine, "before_cursor_execute", record)
    try:
        with (
            mock.patch.object(BaseHook, "get_connection", forbidden),
            mock.patch.object(Variable, "get", forbidden),
        ):
            bag = DagBag(dag_folder=str(DAGS))
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    bag.parse_queries = queries  # type: ignore[attr-defined]
    bag.lookups = forbidden.call_count  # type: ignore[attr-defined]
    return bag


def test_every_dag_file_imports(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    files = {p.name for p in DAGS.glob("*.py")}
    loaded = {Path(d.fileloc).name for d in dagbag.dags.values()}
    assert files and files == loaded, f"files without a DAG: {files - loaded}"


def test_no_db_or_connection_access_at_parse_time(dagbag: Any) -> None:
    assert dagbag.parse_queries == []
    assert dagbag.lookups == 0


def test_one_ingest_dag_per_table(dagbag: Any) -> None:
    from tidemark.config import load_tables

    expected = {f"tidemark_ingest_{t.table}" for t in load_tables()}
    assert expected <= set(dagbag.dag_ids)


@pytest.mark.parametrize("attribute", ["retries", "tags", "doc_md"])
def test_dag_hygiene(dagbag: Any, attribute: str) -> None:
    for dag in dagbag.dags.values():
        if attribute == "retries":
            assert all(t.retries >= 2 for t in dag.tasks), dag.dag_id
        elif attribute == "tags":
            assert dag.tags and "tidemark" in dag.tags, dag.dag_id
        else:
            assert dag.doc_md and len(dag.doc_md.strip()) > 40, dag.dag_id


def test_ingest_dag_passes_templated_run_id(dagbag: Any) -> None:
    dag = dagbag.dags["tidemark_ingest_events"]
    dump = dag.get_task("dump")
    assert dag.max_active_runs == 1
    assert "{{ run_id }}" in dump.application_args
    assert dump.application.endswith("spark_jobs/dump.py")


def test_ingest_dag_is_dump_seal_announce_with_the_metastore_pool(dagbag: Any) -> None:
    dag = dagbag.dags["tidemark_ingest_events"]
    dump, seal, announce = (dag.get_task(t) for t in ("dump", "seal", "announce"))
    assert dump.downstream_task_ids == {"seal"} and seal.downstream_task_ids == {"announce", "metrics"}
    assert dag.get_task("metrics").trigger_rule == "all_done"
    assert seal.pool == "hive_metastore"
    assert seal.application.endswith("spark_jobs/seal.py") and "{{ run_id }}" in seal.application_args
    assert [a.name for a in announce.outlets] == ["tidemark.events"]
    assert [a.name for a in announce.inlets] == ["tidemark.events"]
