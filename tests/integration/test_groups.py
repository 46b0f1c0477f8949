"""A group of tables in one Spark session (tidemark.group.runner) against the real broker,
Spark and the Hive metastore: a poisoned table (its topic missing on the broker; a refused
schema change) fails alone, every other table commits and seals exactly, the poisoned one is
finished later by running it alone with the same run id, and the group's hour is complete
only when every table has published it."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.tables import at, fresh_table, landed, registered
from tidemark.config import TableConfig
from tidemark.group.barrier import complete_hours
from tidemark.group.members import group_members
from tidemark.group.outcomes import FAILED, OK, read_outcome
from tidemark.group.runner import GroupRun, run_group
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.mode import TableWriter
from tidemark.stream.group import run_group_streams
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

HOURS_10_AND_11 = [(p, at(10, m)) for p in (0, 1) for m in (5, 25, 45)] + [(0, at(11, 50)), (1, at(11, 40))]


def grouped_tables(settings: Settings, tmp_path: Path, count: int) -> tuple[str, list[TableConfig], Settings]:
    group = f"g_{tmp_path.name[-8:].lower().replace('-', '_')}"
    tables = [fresh_table(settings, tmp_path, group=group) for _ in range(count)]
    return group, [c for c, _ in tables], tables[0][1]


def group_run(group: str, job: str, run_id: str) -> GroupRun:
    return GroupRun(group, job, run_id, at(12), at(12))


def journals(settings: Settings, configs: list[TableConfig]) -> dict[str, Any]:
    return {c.table: HourJournal(settings.state_dir, c.table).state() for c in configs}


def test_a_poisoned_table_fails_alone_and_is_finished_alone_with_the_same_run_id(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    group, configs, settings = grouped_tables(settings, tmp_path, 3)
    assert [c.table for c in group_members(group, settings)] == sorted(c.table for c in configs)
    poisoned, *healthy = configs
    sent = {}
    for config in healthy:
        create_topic(broker, config.source.topic, 2)
        sent[config.table] = produce(broker, config.source.topic, records(HOURS_10_AND_11))

    # A dry run (the trigger form's) previews every table, records what each table's task
    # reports, and commits nothing.
    preview = run_group(spark, configs, settings, replace(group_run(group, "dump", "dry-1"), dry_run=True))
    assert {t: o["status"] for t, o in preview["tables"].items()} == {
        poisoned.table: FAILED,
        **{c.table: OK for c in healthy},
    }
    assert read_outcome(settings.state_dir, healthy[0].table, "dump", "dry-1") is not None
    assert all(CommitLog(settings.state_dir, c.table).state().batches == 0 for c in configs)

    dump = run_group(spark, configs, settings, group_run(group, "dump", "run-1"))
    assert dump["failed"] == [poisoned.table]
    failure = read_outcome(settings.state_dir, poisoned.table, "dump", "run-1")
    assert failure is not None and failure.status == FAILED
    assert failure.error_type == "BrokerUnavailableError" and poisoned.source.topic in failure.detail
    for config in healthy:
        outcome = read_outcome(settings.state_dir, config.table, "dump", "run-1")
        assert outcome is not None and outcome.status == OK and outcome.result["status"] == "committed"

    seal = run_group(spark, configs, settings, group_run(group, "seal", "run-1"))
    assert seal["failed"] == []
    for config in healthy:
        assert registered(spark, config.table) == ["dt=2026-11-22/hr=10"]
        rows, dirty, _ = landed(settings, config.table)
        assert rows == Counter((p, o) for p, o, _ in sent[config.table]) and not dirty
    # The barrier: hour 10 is sealed by two tables, the third has not spoken.
    assert complete_hours(journals(settings, configs)) == {}

    # The topic appears; the poisoned table's own task runs it alone, same run id.
    create_topic(broker, poisoned.source.topic, 2)
    sent[poisoned.table] = produce(broker, poisoned.source.topic, records(HOURS_10_AND_11))
    alone = run_group(spark, [poisoned], settings, group_run(group, "dump", "run-1"))
    assert alone["failed"] == [] and alone["tables"][poisoned.table]["status"] == OK
    run_group(spark, [poisoned], settings, group_run(group, "seal", "run-1"))
    for config in configs:
        assert CommitLog(settings.state_dir, config.table).batch_of_run("run-1") == 0
        rows, _, _ = landed(settings, config.table)
        assert rows == Counter((p, o) for p, o, _ in sent[config.table])
    complete = complete_hours(journals(settings, configs))
    assert complete == {"2026-11-22T10": dict.fromkeys(sorted(c.table for c in configs), 1)}

    # Running the whole group again for the same run id changes nothing (idempotent per table).
    again = run_group(spark, configs, settings, group_run(group, "dump", "run-1"))
    assert {t: o["status"] for t, o in again["tables"].items()} == dict.fromkeys(again["tables"], OK)
    for config in configs:
        assert landed(settings, config.table)[0] == Counter((p, o) for p, o, _ in sent[config.table])


def test_a_refused_schema_change_stops_its_table_only(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    group, configs, settings = grouped_tables(settings, tmp_path, 2)
    for config in configs:
        create_topic(broker, config.source.topic, 2)
        produce(broker, config.source.topic, records(HOURS_10_AND_11))
    first = run_group(spark, configs, settings, group_run(group, "dump", "run-1"))
    assert first["failed"] == []
    # An incompatible change of one table's YAML (a column's type narrowed).
    changed, other = configs
    path = settings.conf_dir / f"{changed.table}.yaml"
    data = yaml.safe_load(path.read_text())
    data["schema"]["amount"] = "int"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert [c.table for c in group_members(group, settings)] == sorted(c.table for c in configs)
    members = {c.table: c for c in group_members(group, settings)}
    produce(broker, other.source.topic, records([(0, at(12, 5)), (1, at(12, 6))], prefix="b"))
    second = run_group(
        spark, [members[changed.table], members[other.table]], settings, group_run(group, "dump", "run-2")
    )
    assert second["failed"] == [changed.table]
    refused = read_outcome(settings.state_dir, changed.table, "dump", "run-2")
    assert refused is not None and refused.error_type == "SchemaEvolutionError"
    assert CommitLog(settings.state_dir, other.table).batch_of_run("run-2") == 1
    assert CommitLog(settings.state_dir, changed.table).batch_of_run("run-2") is None


def test_one_application_hosts_the_streams_of_a_group_and_a_failing_one_stops_alone(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """Three tables of a group in stream mode, one poisoned (its topic missing), one left in
    batch mode: one session runs the two healthy queries to the broker's end, the poisoned
    one fails alone, the batch table is not touched."""

    group, configs, settings = grouped_tables(settings, tmp_path, 4)
    poisoned, *healthy, batch = configs
    sent = {}
    for config in [*healthy, batch]:
        create_topic(broker, config.source.topic, 2)
        sent[config.table] = produce(broker, config.source.topic, records(HOURS_10_AND_11))
    for config in [poisoned, *healthy]:
        TableWriter(settings.state_dir, config.table).switch(
            "stream", by="test", reason="test", at=at(12).isoformat()
        )
    result = run_group_streams(
        spark,
        group,
        settings,
        "stream-1",
        clock=lambda: at(12),
        until_caught_up=True,
        trigger_interval_s=0.5,
        poll_s=0.2,
    )
    assert result["failed"] == [poisoned.table]
    assert "BrokerUnavailableError" in result["tables"][poisoned.table]["error"]
    for config in healthy:
        assert "caught up" in result["tables"][config.table]["reason"]
        rows, dirty, _ = landed(settings, config.table)
        assert rows == Counter((p, o) for p, o, _ in sent[config.table]) and not dirty
    assert batch.table not in result["tables"]
    assert CommitLog(settings.state_dir, batch.table).state().batches == 0
