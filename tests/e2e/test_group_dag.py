"""A group's DAG through Airflow (dag.test) with the real SparkSubmitOperator, broker and
metastore: three tables, one poisoned (its topic is missing on the broker). One Spark
application dumps all three and one seals them; the poisoned table's own mapped task fails
(its retry runs it alone, and fails again), the two others commit, seal and announce their
hours; the group's barrier announces nothing until the poisoned table has sealed the hour too,
and then announces it once."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.tables import at, fresh_table, landed
from tidemark.config import TableConfig
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.mode import TableWriter
from tidemark.stream.launch import launch_stream
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.e2e

HOURS_10_AND_11 = [(p, at(10, m)) for p in (0, 1) for m in (5, 25, 45)] + [(0, at(11, 50)), (1, at(11, 40))]


def run_group_dag(dag_id: str, tables: list[str], when: Any) -> dict[str, tuple[str, int]]:
    """One dag.test() run; (task id, or task id[table] for mapped ones) -> (state, try number)."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).get_dag(dag_id)
    assert dag is not None, dag_id
    run = dag.test(logical_date=when, run_after=when)
    return {
        (ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{tables[ti.map_index]}]"): (
            str(ti.state),
            ti.try_number,
        )
        for ti in run.get_task_instances()
    }


def events_of(asset_name: str) -> list[str]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
        return sorted(str(e.partition_key) for e in rows.filter(AssetModel.name == asset_name).all())


def test_a_group_dag_isolates_a_poisoned_table_and_announces_the_groups_hour_once_all_sealed_it(
    dag_env: Settings, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = f"g_{tmp_path.name[-6:].lower().replace('-', '_')}"
    made = [fresh_table(dag_env, tmp_path, group=group, retries=1, retry_delay="0s") for _ in range(3)]
    settings = made[0][1]
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(settings.conf_dir))
    configs: list[TableConfig] = sorted((c for c, _ in made), key=lambda c: c.table)
    tables = [c.table for c in configs]
    poisoned = configs[1].table
    sent: dict[str, list[Any]] = {}
    for config in configs:
        if config.table != poisoned:
            create_topic(broker, config.source.topic, 2)
            sent[config.table] = produce(broker, config.source.topic, records(HOURS_10_AND_11))
    dag_id = f"tidemark_group_{group}"

    first = run_group_dag(dag_id, tables, at(12))
    healthy = [t for t in tables if t != poisoned]
    assert first["dump"] == ("success", 1)  # the shared application succeeds although a table failed
    assert first[f"dump_table[{poisoned}]"] == ("failed", 2)  # its retry ran it alone: failed again
    assert first["seal"] == ("success", 1)
    assert first["every_table_ok"][0] == "upstream_failed"  # the run says a table failed
    assert first["announce_group"][0] == "skipped"
    for table in healthy:
        assert first[f"dump_table[{table}]"] == ("success", 1)
        assert first[f"seal_table[{table}]"] == ("success", 1)
        assert first[f"announce_{table}"][0] == "success"
        assert events_of(f"tidemark.{table}") == ["2026-11-22T10"]
        rows, dirty, _ = landed(settings, table)
        assert rows == Counter((p, o) for p, o, _ in sent[table]) and not dirty
    assert first[f"seal_table[{poisoned}]"] == ("success", 1)  # nothing to seal is not a failure
    assert events_of(f"tidemark.group.{group}") == []

    # The topic appears: the next run dumps and seals the poisoned table with the others, and
    # the group's hour 10 is announced, once.
    create_topic(broker, f"{poisoned}", 2)
    sent[poisoned] = produce(broker, poisoned, records(HOURS_10_AND_11))
    second = run_group_dag(dag_id, tables, at(12, 30))
    nothing_new = {f"announce_{t}": "skipped" for t in healthy}  # their hour 10 was announced in run 1
    assert {k: v[0] for k, v in second.items() if v[0] != "success"} == nothing_new
    assert events_of(f"tidemark.group.{group}") == ["2026-11-22T10"]
    assert events_of(f"tidemark.{poisoned}") == ["2026-11-22T10"]
    for table in tables:
        rows, dirty, _ = landed(settings, table)
        assert rows == Counter((p, o) for p, o, _ in sent[table]) and not dirty
    assert (
        CommitLog(settings.state_dir, poisoned).batch_of_run("manual__2026-11-22T12:30:00+00:00") is not None
    )

    # The stream of the group: one table switched to stream is started by its stream DAG's
    # launch as the group's application (spark-submit of spark_jobs/group.py --job stream);
    # a second launch finds it running; switched back to batch, the application ends.
    streamed = healthy[0]
    more = produce(broker, streamed, records([(0, at(12, 40)), (1, at(12, 41))], prefix="s"))
    TableWriter(settings.state_dir, streamed).switch(
        "stream", by="test", reason="test", at=at(13).isoformat()
    )
    launched = launch_stream(settings, streamed, "stream__1")
    assert launched["launched"], launched
    app = psutil.Process(launched["pid"])
    log = CommitLog(settings.state_dir, streamed)
    wait_for(lambda: log.state().end_offsets == {p: o + 1 for p, o, _ in sorted(sent[streamed] + more)}, app)
    again = launch_stream(settings, streamed, "stream__2")
    assert not again["launched"] and "stream application runs" in again["why"]
    TableWriter(settings.state_dir, streamed).switch(
        "batch", by="test", reason="test", at=at(13, 5).isoformat()
    )
    app.wait(timeout=120)
    rows, dirty, _ = landed(settings, streamed)
    assert rows == Counter((p, o) for p, o, _ in sent[streamed] + more) and not dirty


def wait_for(done: Any, app: Any, timeout: float = 180.0) -> None:
    """Poll ``done()`` while the application ``app`` lives."""
    import time

    deadline = time.monotonic() + timeout
    while not done():
        assert app.is_running() and app.status() != "zombie", "the group's stream application ended"
        assert time.monotonic() < deadline, "the stream did not catch up"
        time.sleep(1)
