"""The ingest DAG through Airflow (dag.test): dump -> seal -> announce with the real
SparkSubmitOperator (spark-submit processes), the real broker and the Derby metastore.
Asset events carry the sealed hours as partition keys, once each, even when the announce task
failed in an earlier run."""

from __future__ import annotations

import os
import urllib.parse
import uuid
from collections import Counter
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dags import asset_events, core_api, extra_links
from tests.helpers.tables import at, fresh_table, landed
from tidemark.faults import ANNOUNCE_POINTS
from tidemark.observe.alerts import recent_failures
from tidemark.observe.batch_table import run_anchor
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.layout import version_dir_of
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.e2e


def run_dag(config_dir: Path, dag_id: str, when: datetime, conf: dict[str, Any] | None = None) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).get_dag(dag_id)
    assert dag is not None, f"{dag_id} not built from {config_dir}"
    return dag.test(logical_date=when, run_after=when, run_conf=conf)


def table_with_two_hours(
    base: Settings, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, retries: int
) -> tuple[Any, Settings, list[tuple[int, int, Any]]]:
    """A fresh table whose DAGs read its own conf dir, and records of hours 10 and 11 on both
    MQ partitions (hour 10 is complete once they are read)."""
    config, settings = fresh_table(base, tmp_path, retries=retries, retry_delay="0s")
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(settings.conf_dir))
    create_topic(broker, config.source.topic, 2)
    sent = produce(
        broker,
        config.source.topic,
        records([(p, at(10, m)) for p in (0, 1) for m in (5, 25, 45)] + [(0, at(11, 50)), (1, at(11, 40))]),
    )
    return config, settings, sent


def test_ingest_dag_seals_and_announces_each_hour_once(
    dag_env: Settings, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, settings, sent = table_with_two_hours(dag_env, broker, tmp_path, monkeypatch, retries=2)
    dag_id = f"tidemark_ingest_{config.table}"
    # Run 1: hour 10 is sealed, but the announce task fails (injected) before emitting.
    before, after = ANNOUNCE_POINTS
    monkeypatch.setenv("TIDEMARK_FAIL_AT", before)
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    first = run_dag(settings.conf_dir, dag_id, at(12))
    states = {ti.task_id: ti.state for ti in first.get_task_instances()}
    assert states == {
        "dump": "success",
        "seal": "success",
        "announce": "failed",
        "metrics": "success",
        "check_deadlines": "success",
    }
    assert asset_events(dag_id) == []
    # The failure callback recorded it for the health page.
    failures = recent_failures(settings, config.table)
    assert [(f["task_id"], f["try_number"]) for f in failures] == [("announce", 3)]  # the final try only
    assert f"TIDEMARK_FAIL_AT={before}" in failures[0]["error"]

    # Run 2: more data seals hour 11; announce adds the events of 10 and 11, then dies before
    # Airflow records them (injected after the events were added): none is recorded.
    sent += produce(broker, config.source.topic, records([(0, at(12, 30)), (1, at(12, 25))], prefix="b"))
    monkeypatch.setenv("TIDEMARK_FAIL_AT", after)
    failed_after = run_dag(settings.conf_dir, dag_id, at(12, 30))
    assert {ti.task_id: ti.state for ti in failed_after.get_task_instances()}["announce"] == "failed"
    assert asset_events(dag_id) == []
    monkeypatch.delenv("TIDEMARK_FAIL_AT")

    # Run 3: announce catches up on hours 10 and 11, once each.
    second = run_dag(settings.conf_dir, dag_id, at(12, 35))
    assert {ti.task_id: ti.state for ti in second.get_task_instances()} == dict.fromkeys(
        ("dump", "seal", "announce", "metrics", "check_deadlines"), "success"
    )
    assert sorted(asset_events(dag_id)) == [("2026-11-22T10", 1), ("2026-11-22T11", 1)]

    # Run 4: nothing new: no event, and the announced pointer covers both hours.
    third = run_dag(settings.conf_dir, dag_id, at(12, 40))
    assert {ti.task_id: ti.state for ti in third.get_task_instances()}["announce"] == "skipped"
    assert Counter(k for k, _ in asset_events(dag_id)) == {"2026-11-22T10": 1, "2026-11-22T11": 1}
    journal = HourJournal(settings.state_dir, config.table)
    assert journal.announced_through() == 1

    rows, dirty, _ = landed(settings, config.table)
    assert rows == Counter((p, o) for p, o, _ in sent) and not dirty


def test_params_that_do_not_go_together_and_a_decision_that_cannot_apply_fail_once_never_retried(
    dag_env: Settings, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay without a reason fails before any Spark process starts; a decision the job
    refuses (a skip with no pending batch) fails at its first try: neither is retried, as a
    retry cannot change them."""
    config, settings, _ = table_with_two_hours(dag_env, broker, tmp_path, monkeypatch, retries=2)
    dag_id = f"tidemark_ingest_{config.table}"
    first = run_dag(settings.conf_dir, dag_id, at(12), {"replay_dirty": "all"})
    assert {ti.task_id: ti.state for ti in first.get_task_instances()}["dump"] == "failed"
    assert CommitLog(settings.state_location, config.table).plan(0) is None  # no job ran
    second = run_dag(settings.conf_dir, dag_id, at(12, 5), {"resolve": "skip", "resolve_reason": "poison"})
    assert {ti.task_id: ti.state for ti in second.get_task_instances()}["dump"] == "failed"
    failures = [(f["task_id"], f["try_number"], f["error"]) for f in recent_failures(settings, config.table)]
    assert [(task, tries) for task, tries, _ in failures] == [("dump", 1), ("dump", 1)]  # each its first try
    errors = sorted(error for _, _, error in failures)
    assert "not retried" in errors[0] and "replay of 'all' needs a reason" in errors[1], errors
    # a rebuild range whose last hour is before its first: its plan task fails once, no Spark
    rebuild = run_dag(
        settings.conf_dir,
        f"tidemark_rebuild_{config.table}",
        at(12, 10),
        {"first_hour": "2026-11-22T11", "last_hour": "2026-11-22T10"},
    )
    assert {ti.task_id: ti.state for ti in rebuild.get_task_instances()}["plan"] == "failed"
    (plan,) = [f for f in recent_failures(settings, config.table) if f["task_id"] == "plan"]
    assert plan["try_number"] == 1 and "the last hour is before the first" in plan["error"]


def test_ingest_dag_on_an_s3_warehouse_and_s3_state(
    dag_env: Settings, broker: str, s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The production topology through Airflow: the DAGs import with the warehouse and the
    state on S3 (a real SeaweedFS), and dump -> seal -> announce land every message once in
    a version directory the metastore points at."""

    lake = f"{s3}/{uuid.uuid4().hex[:10]}"
    on_s3 = replace(dag_env, warehouse=f"{lake}/warehouse", state_uri=f"{lake}/state")
    monkeypatch.setenv("TIDEMARK_WAREHOUSE", on_s3.warehouse)
    monkeypatch.setenv("TIDEMARK_STATE_DIR", f"{lake}/state")
    config, settings, sent = table_with_two_hours(on_s3, broker, tmp_path, monkeypatch, retries=1)
    dag_id = f"tidemark_ingest_{config.table}"
    run = run_dag(settings.conf_dir, dag_id, at(12))
    assert {ti.task_id: ti.state for ti in run.get_task_instances()} == dict.fromkeys(
        ("dump", "seal", "announce", "metrics", "check_deadlines"), "success"
    )
    rows, dirty, _ = landed(settings, config.table)
    assert dirty == Counter() and rows == Counter((p, o) for p, o, _ in sent)
    sealed = HourJournal(settings.state_location, config.table).state().hours["2026-11-22T10"]
    assert sealed.rows == 6
    (directory,) = {version_dir_of(f) for f in sealed.files}
    assert directory is not None and directory.startswith(
        f"{config.table}/dt=2026-11-22/hr=10/_versions/v0001-b"
    )
    assert asset_events(dag_id) == [("2026-11-22T10", 1)]


def test_the_dump_task_log_keeps_sparks_levels_and_shows_progress_per_mq_partition(
    dag_env: Settings,
    broker: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A WARN of the Spark JVM reaches the task log as a warning, not INFO; the JVM's start-up
    INFO lines go to the task try's file instead (the seal's: it creates the table, through
    Spark; the dump's read tasks run without a JVM on the local master); the dump logs a line
    per MQ partition."""
    config, settings, _ = table_with_two_hours(dag_env, broker, tmp_path, monkeypatch, retries=0)
    # a deprecated key: Spark's SparkConf warns about it at start, a WARN line of the JVM's own
    monkeypatch.setenv("TIDEMARK_SPARK_CONF", '{"spark.yarn.executor.memoryOverhead": "384"}')
    dag_id = f"tidemark_ingest_{config.table}"
    done = run_dag(settings.conf_dir, dag_id, at(12))
    assert {ti.task_id: ti.state for ti in done.get_task_instances()}["dump"] == "success"
    # the extra links of the dump and seal task instances: the batch's row, the hour's Data Docs
    links = extra_links(dag_id, done.run_id)
    assert links[("dump", "BatchReconciliationLink")] == (
        f"/tidemark/tables/{config.table}/health#{run_anchor(done.run_id)}"
    )
    assert links[("seal", "HourDataDocsLink")].startswith(
        f"/tidemark/tables/{config.table}/docs/validations/{config.table}/2026-11-22T10/"
    )
    # as the UI shows them: the task instance's links from Airflow's REST API
    run = urllib.parse.quote(done.run_id, safe="")
    shown = core_api("admin").get(f"/api/v2/dags/{dag_id}/dagRuns/{run}/taskInstances/dump/links")
    assert shown.status_code == 200, shown.text
    assert shown.json()["extra_links"] == {"Batch reconciliation": links[("dump", "BatchReconciliationLink")]}
    captured = capfd.readouterr()
    lines = (captured.out + captured.err).splitlines()
    warned = [line for line in lines if "WARN SparkConf: The configuration key 'spark.yarn" in line]
    assert warned and all("[warning" in line for line in warned), warned
    assert not [line for line in lines if "INFO SparkContext: Running Spark version" in line]
    for partition in (0, 1):
        assert any(
            f"batch 0 MQ partition {partition} (offsets 0..3): read 4, rows staged 4" in line
            for line in lines
        )
    assert any("tasks run in processes forked from the driver" in line for line in lines)
    assert not list((settings.log_dir / "jobs" / dag_id).glob("*/dump.1.jvm.log"))  # no JVM: no file
    (jvm_log,) = (settings.log_dir / "jobs" / dag_id).glob("*/seal.1.jvm.log")
    assert "INFO SparkContext: Running Spark version" in jvm_log.read_text()  # kept, in its file
