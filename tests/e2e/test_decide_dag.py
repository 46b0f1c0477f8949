"""A way out approved by a person in Airflow: the decide DAG runs (``dag.test()``), its
human-in-the-loop task waits, a named user approves through Airflow's own REST API (the
public HITL endpoint of the API server's app, on the same metadata DB), and the audit record
names that user. A rejection changes nothing; a decision that cannot apply asks nobody."""

from __future__ import annotations

import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dags import core_api, run_dag
from tests.helpers.locks import plant
from tests.helpers.tables import at, fresh_table
from tidemark.cli import main as tidemark
from tidemark.ingest.kafka import client_properties
from tidemark.ingest.planner import plan_batch
from tidemark.settings import Settings
from tidemark.table import Table
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.e2e


def answer_when_asked(dag_id: str, chosen: str, user: str, answered: list[Any]) -> threading.Thread:
    """In the background: wait for the run's approval task to ask, then answer as ``user``."""

    def answer() -> None:
        client = core_api(user)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            waiting = client.get(f"/api/v2/dags/{dag_id}/dagRuns/~/hitlDetails")
            details = [d for d in waiting.json().get("hitl_details", []) if not d.get("response_received")]
            if details:
                detail = details[0]
                ti = detail["task_instance"]
                run = urllib.parse.quote(ti["dag_run_id"], safe="")
                url = f"/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances/{ti['task_id']}/-1/hitlDetails"
                answered.append(client.patch(url, json={"chosen_options": [chosen], "params_input": {}}))
                return
            time.sleep(1)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return thread


def stuck_table(
    base: Settings, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Settings]:
    """A table whose batch is planned and never committed (its run died): the pending batch."""
    config, settings = fresh_table(base, tmp_path, retries=0)
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(settings.conf_dir))
    create_topic(broker, config.source.topic, 2)
    produce(broker, config.source.topic, records([(p, at(10, m)) for p in (0, 1) for m in (5, 25)]))
    state = Table.state_of(settings.state_location, config.table)
    plan_batch(config, state, "run-died", at(11).isoformat(), client_properties(broker, {}))
    assert state.commit_log.pending_plan(state.commit_log.state()) is not None
    return config, settings


def test_a_replan_approved_in_airflow_names_the_approver_and_a_rejection_changes_nothing(
    dag_env: Settings, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, settings = stuck_table(dag_env, broker, tmp_path, monkeypatch)
    dag_id = f"tidemark_decide_{config.table}"
    log = Table.state_of(settings.state_location, config.table).commit_log
    conf = {"action": "replan", "reason": "stale plan, INC-7"}

    answered: list[Any] = []
    rejecting = answer_when_asked(dag_id, "Reject", "bob", answered)
    states = run_dag(dag_id, at(12), conf)
    rejecting.join(5)
    assert answered and answered[0].status_code == 200, answered
    assert states == {"propose": "success", "approve": "success", "apply": "skipped"}
    assert log.pending_plan(log.state()) is not None  # rejected: nothing changed
    assert list(Table.state_of(settings.state_location, config.table).audit.records()) == []

    answered.clear()
    approving = answer_when_asked(dag_id, "Approve", "alice", answered)
    states = run_dag(dag_id, at(12, 5), conf)
    approving.join(5)
    assert states == {"propose": "success", "approve": "success", "apply": "success"}, states
    assert log.pending_plan(log.state()) is None  # closed with nothing read: the next run plans afresh
    (record,) = Table.state_of(settings.state_location, config.table).audit.records()
    assert (record.action, record.by, record.reason) == ("replan", "alice via Airflow", "stale plan, INC-7")

    # nothing pending now: a second replan fails at propose, before anybody is asked, unretried
    states = run_dag(dag_id, at(12, 10), conf)
    assert states == {"propose": "failed", "approve": "upstream_failed", "apply": "upstream_failed"}


def test_an_unlock_approved_in_airflow_frees_a_lost_hosts_lock_and_the_cli_does_the_same(
    dag_env: Settings, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, settings = fresh_table(dag_env, tmp_path, retries=0)
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(settings.conf_dir))
    lock = Table.state_of(settings.state_location, config.table).lock()
    plant(lock, 0, host="lost-host", expires_at="2999-01-01T00:00:00+00:00")
    dag_id = f"tidemark_decide_{config.table}"

    answered: list[Any] = []
    approving = answer_when_asked(dag_id, "Approve", "carol", answered)
    states = run_dag(dag_id, at(12), {"action": "unlock", "reason": "host lost-host decommissioned"})
    approving.join(5)
    assert states == {"propose": "success", "approve": "success", "apply": "success"}, states
    assert lock.holder() is None
    (record,) = Table.state_of(settings.state_location, config.table).audit.records()
    assert (record.action, record.by) == ("unlock", "carol via Airflow") and "lost-host" in record.offsets

    plant(lock, 2, host="lost-host-2", expires_at="2999-01-01T00:00:00+00:00")
    assert tidemark(["unlock", "--table", config.table, "--reason", "gone too", "--by", "dave"]) == 0
    assert lock.holder() is None
    assert [r.by for r in Table.state_of(settings.state_location, config.table).audit.records()] == [
        "carol via Airflow",
        "dave",
    ]
