"""A topic family run as a group, through Airflow (dag.test) with the real
SparkSubmitOperator, broker and metastore. The family's discovery DAG makes three topics
tables of one group (no deploy); one is poisoned (its topic deleted from the broker). One
Spark application dumps all three and one seals them; the poisoned table's own mapped task
fails (its retry runs it alone, and fails again), the two others commit, seal and announce
their hours; the group's barrier announces nothing until the poisoned table has sealed the
hour too, and then announces it once. Then one table's stream runs in the group's stream
application, launched by its stream DAG's launch, and ends when the table is handed back."""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.helpers.tables import at, landed
from tests.helpers.timeouts import HEAVY
from tidemark.catalog import load_tables
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.mode import TableWriter
from tidemark.stream.launch import launch_stream
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

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


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures are done
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=30)


def events_of(asset_name: str) -> list[str]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
        return sorted(str(e.partition_key) for e in rows.filter(AssetModel.name == asset_name).all())


def write_family(conf_dir: Path, family: str, group: str, prefix: str) -> None:
    """A topic family whose members all belong to ``group``: every topic ``<prefix>.<word>``."""
    data = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    data.pop("table")
    data["source"].pop("topic")
    data.update({"family": family, "table": "{topic}", "group": group, "retries": 1, "retry_delay": "0s"})
    data["source"]["topic_pattern"] = rf"{prefix}\.[a-z]+"
    (conf_dir / "families").mkdir(parents=True)
    (conf_dir / "families" / f"{family}.yaml").write_text(yaml.safe_dump(data))


def test_a_family_as_a_group_isolates_a_poisoned_table_and_announces_the_groups_hour_once_all_sealed_it(
    dag_env: Settings, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suffix = tmp_path.name[-6:].lower().replace("-", "_")
    family, group, prefix = f"fam_{suffix}", f"g_{suffix}", f"t{uuid.uuid4().hex[:6]}"
    settings = replace(dag_env, conf_dir=tmp_path / "conf")
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(settings.conf_dir))
    write_family(settings.conf_dir, family, group, prefix)
    topics = [f"{prefix}.{word}" for word in ("alpha", "beta", "gamma")]
    for topic in topics:
        create_topic(broker, topic, 2)
    # Discovery through its DAG: the three topics become the group's tables, no deploy.
    found = run_group_dag(f"tidemark_discover_{family}", [], at(11, 59))
    assert found == {"discover": ("success", 1)}
    tables = [f"{prefix}_{word}" for word in ("alpha", "beta", "gamma")]
    topic_of = dict(zip(tables, topics, strict=True))
    assert [c.table for c in load_tables(settings)] == tables
    poisoned = tables[1]
    delete_topic(broker, topic_of[poisoned])  # its topic goes away (for less than retire_after)
    sent: dict[str, list[Any]] = {}
    for table in tables:
        if table != poisoned:
            sent[table] = produce(broker, topic_of[table], records(HOURS_10_AND_11))
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
    create_topic(broker, topic_of[poisoned], 2)
    sent[poisoned] = produce(broker, topic_of[poisoned], records(HOURS_10_AND_11))
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
    more = produce(broker, topic_of[streamed], records([(0, at(12, 40)), (1, at(12, 41))], prefix="s"))
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

    deadline = time.monotonic() + timeout
    while not done():
        assert app.is_running() and app.status() != "zombie", "the group's stream application ended"
        assert time.monotonic() < deadline, "the stream did not catch up"
        time.sleep(1)


@HEAVY
def test_a_groups_barrier_through_a_broken_member_a_mended_one_and_a_retired_one(
    dag_env: Settings, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three YAML tables of one group, through the group DAG (dag.test): while one member's
    YAML is broken the barrier announces nothing (its hours may be unpublished: none early);
    mended, the group's hour is announced once and no earlier hour again; a member whose
    topic is retired stops holding the barrier once its last hour is published."""
    suffix = tmp_path.name[-6:].lower().replace("-", "_")
    group = f"gy_{suffix}"
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(conf))
    template = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    tables = [f"{group}_{n}" for n in ("a", "b", "c")]

    def write(table: str, **changes: Any) -> None:
        data = {**template, "table": table, "group": group, "retries": 0}
        data["source"] = {**template["source"], "topic": table, **changes}
        (conf / f"{table}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))

    for table in tables:
        write(table)
        create_topic(broker, table, 2)
        produce(broker, table, records(HOURS_10_AND_11))
    dag_id, asset = f"tidemark_group_{group}", f"tidemark.group.{group}"
    first = run_group_dag(dag_id, tables, at(12))
    assert first["announce_group"][0] == "success" and events_of(asset) == ["2026-11-22T10"]

    broken = tables[2]
    (conf / f"{broken}.yaml").write_text(
        (conf / f"{broken}.yaml").read_text().replace("event_time:", "event_tim:")
    )
    for table in tables[:2]:
        produce(broker, table, records([(p, at(12, 40)) for p in (0, 1)], prefix="h12"))
    second = run_group_dag(dag_id, tables[:2], at(13, 5))  # its DAG has only the loadable tables
    assert second["announce_group"][0] == "skipped" and events_of(asset) == ["2026-11-22T10"]  # held

    write(broken)  # mended: it seals hour 11 too; the group's hour 11 is announced, once
    produce(broker, broken, records([(p, at(12, 40)) for p in (0, 1)], prefix="h12"))
    third = run_group_dag(dag_id, tables, at(13, 10))
    assert third["announce_group"][0] == "success"
    assert events_of(asset) == ["2026-11-22T10", "2026-11-22T11"]

    write(broken, retired=True)  # its topic is gone for good: it seals its last hour (12), no later
    for table in tables[:2]:
        produce(broker, table, records([(p, at(13, 50)) for p in (0, 1)], prefix="h13"))
    run_group_dag(dag_id, tables, at(14, 20))  # its partitions idle: every table seals hour 12
    assert events_of(asset) == ["2026-11-22T10", "2026-11-22T11", "2026-11-22T12"]
    for table in tables[:2]:
        produce(broker, table, records([(p, at(14, 30)) for p in (0, 1)], prefix="h14"))
    run_group_dag(dag_id, tables, at(15, 30))  # the retired member never seals hour 13: not held
    assert events_of(asset) == ["2026-11-22T10", "2026-11-22T11", "2026-11-22T12", "2026-11-22T13"]
