"""A topic family against the real broker, Spark and metastore: discovery makes each matching
topic a table (its DAGs appear, no deploy), a member lands exactly like any table, and a topic
deleted from the broker retires its table after the grace: its runs read no broker and its
last record's hour seals, no later one."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.avro import EVENT_V1, EVENT_V2, avro_events
from tests.helpers.tables import at, landed, registered
from tidemark.airflow.dags import all_dags
from tidemark.catalog import load_table, load_tables
from tidemark.catalog.families import family_tables
from tidemark.catalog.family_members import read_members
from tidemark.errors import ConfigError, MembershipError
from tidemark.family.discovery import discover_family
from tidemark.family.retirement import forget_member
from tidemark.ingest.dump import run_dump
from tidemark.observe.status import render, table_status
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.audit import AuditLog
from tidemark.state.commitlog import CommitLog
from tidemark_dev.generator import Message, create_topic, produce, records

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def write_family(conf_dir: Path, name: str, prefix: str) -> None:
    data = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    data.pop("table")
    data["source"].pop("topic")
    data.update({"family": name, "table": "{topic}", "retire_after": "30m"})
    data["source"]["topic_pattern"] = rf"{prefix}\.[a-z]+"
    (conf_dir / "families").mkdir(parents=True)
    (conf_dir / "families" / f"{name}.yaml").write_text(yaml.safe_dump(data))


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the futures are done
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=30)


def test_discovery_makes_tables_of_new_topics_and_retires_a_deleted_one(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    prefix = f"fam{uuid.uuid4().hex[:6]}"
    settings = replace(settings, conf_dir=tmp_path / "conf")
    write_family(settings.conf_dir, "clicks", prefix)
    web, app = f"{prefix}.web", f"{prefix}.app"
    for topic in (web, app, f"other{prefix}.web"):
        create_topic(broker, topic, 2)
    assert not [d for d in all_dags(settings) if prefix in d]

    found = discover_family("clicks", settings, at=at(12))
    assert (found.new, found.retired, found.members) == ([app, web], [], 2)
    web_table = f"{prefix}_web"
    assert [t.table for t in load_tables(settings)] == [f"{prefix}_app", web_table]
    dags = all_dags(settings)  # what the DAG files build now: no deploy needed
    assert {
        f"tidemark_ingest_{web_table}",
        f"tidemark_ingest_{prefix}_app",
        "tidemark_discover_clicks",
    } <= set(dags)

    config = load_table(web_table, settings)
    assert (config.source.topic, config.family, config.source.retired) == (web, "clicks", False)
    sent = produce(
        broker,
        web,
        records([(p, at(10, m)) for p in (0, 1) for m in (5, 45)] + [(0, at(11, 50)), (1, at(11, 40))]),
    )
    run_dump(spark, config, settings, "run-1", at(12))
    assert run_seal(spark, config, settings, "run-1").sealed == ["2026-11-22T10"]

    # The topic goes away: one listing without it retires nothing, the grace does.
    delete_topic(broker, web)
    assert discover_family("clicks", settings, at=at(12, 10)).retired == []
    assert read_members(settings, "clicks").topics[web].missing_since is not None
    assert discover_family("clicks", settings, at=at(12, 45)).retired == [web]
    retired = load_table(web_table, settings)
    assert retired.source.retired and f"tidemark_ingest_{web_table}" in all_dags(settings)
    status = table_status(retired, settings)
    assert status["broker_error"] is None  # nothing asked of the broker about a topic that is gone
    assert render(status).startswith(f"table {web_table} (topic {web}, retired; family clicks)")

    # Its runs read no broker (the topic is gone: any read would fail): empty batches move
    # processing time; once every MQ partition is idle, the last record's hour (11) seals.
    first = run_dump(spark, retired, settings, "run-2", at(12, 20))
    assert first.status == "committed" and first.read == 0
    assert run_seal(spark, retired, settings, "run-2").sealed == []  # partitions not idle yet
    assert discover_family("clicks", settings, at=at(12, 50)).done == []  # hour 11 is not published
    run_dump(spark, retired, settings, "run-3", at(13))
    assert run_seal(spark, retired, settings, "run-3").sealed == ["2026-11-22T11"]
    run_dump(spark, retired, settings, "run-4", at(16))
    assert run_seal(spark, retired, settings, "run-4").sealed == []  # no empty hour after it, ever
    assert registered(spark, web_table) == ["dt=2026-11-22/hr=10", "dt=2026-11-22/hr=11"]
    rows, dirty, _ = landed(settings, web_table)
    assert rows == Counter((p, o) for p, o, _ in sent) and not dirty
    assert CommitLog(settings.state_dir, web_table).state().last_committed == 3

    # Every hour published: discovery marks it done; its DAGs go, its data and state stay.
    assert discover_family("clicks", settings, at=at(16, 30)).done == [web]
    assert load_table(web_table, settings).source.done
    assert not [
        d for d in all_dags(settings) if web_table in d
    ] and f"tidemark_ingest_{prefix}_app" in all_dags(settings)
    # Forgotten only by decision, only when done, with an audit record.

    with pytest.raises(MembershipError, match=f"topic {app} .* is active"):
        forget_member("clicks", app, settings, reason="cleanup", by="ops", at=at(17))
    with pytest.raises(MembershipError, match="needs a --reason"):
        forget_member("clicks", web, settings, reason=" ", by="ops", at=at(17))
    record = forget_member("clicks", web, settings, reason="web client retired", by="ops", at=at(17))
    assert (record.action, record.detail["topic"]) == ("forget", web)
    assert [r.action for r in AuditLog(settings.state_dir, web_table).records()] == ["forget"]
    assert web not in read_members(settings, "clicks").topics
    with pytest.raises(ConfigError):
        load_table(web_table, settings)
    assert registered(spark, web_table) == ["dt=2026-11-22/hr=10", "dt=2026-11-22/hr=11"]  # data stays

    # The topic comes back: a member again (a new one: it was forgotten), read again.
    create_topic(broker, web, 2)
    assert discover_family("clicks", settings, at=at(17)).new == [web]
    assert not load_table(web_table, settings).source.retired


def test_each_member_of_a_registry_family_gets_the_columns_of_its_own_subject(
    spark: Any, broker: str, schema_registry: str, settings: Settings, tmp_path: Path
) -> None:
    """``schema: from_registry``: discovery reads each topic's subject (the registry stand-in,
    through the real client) and records its columns with the member; two topics with other
    schemas become tables with other columns, a topic whose subject does not exist yet has no
    DAGs until a later discovery finds it, and a member lands its Avro records exactly."""

    prefix = f"reg{uuid.uuid4().hex[:6]}"
    settings = replace(settings, conf_dir=tmp_path / "conf")
    write_family(settings.conf_dir, "shop", prefix)
    path = settings.conf_dir / "families" / "shop.yaml"
    data = yaml.safe_load(path.read_text())
    data["schema"] = "from_registry"
    data["source"].update({"format": "avro", "schema_registry": {"url": schema_registry}})
    data["source"].pop("conversions", None)
    path.write_text(yaml.safe_dump(data))
    one, two, three = (f"{prefix}.{w}" for w in ("one", "two", "three"))
    for topic in (one, two, three):
        create_topic(broker, topic, 1)
    times = [{"event_id": f"e{i}", "event_time": at(10, 5 * i)} for i in range(6)]
    sent = produce_values(broker, one, avro_events(schema_registry, times, EVENT_V1, topic=one))
    produce_values(broker, two, avro_events(schema_registry, times[:2], EVENT_V2, topic=two))

    found = discover_family("shop", settings, at=at(12))
    assert found.new == [one, three, two] and found.schemas == [one, two]
    first, second = load_table(f"{prefix}_one", settings), load_table(f"{prefix}_two", settings)
    assert "session" in second.columns and "session" not in first.columns
    assert (
        str(first.columns["user_id"].type.ddl()) == "int"
        and str(second.columns["user_id"].type.ddl()) == "bigint"
    )
    members, problems = family_tables(settings)
    assert sorted(m.table for m in members) == [f"{prefix}_one", f"{prefix}_two"]
    assert any(three in where and f"{three}-value" in problem for where, problem in problems.items())

    result = run_dump(spark, first, settings, "run-1", at(12))
    assert result.read == len(sent) and result.rows == len(sent) and result.dirty == 0

    # The third topic's producer registers its schema: the next discovery gives it columns.
    avro_events(schema_registry, times[:1], EVENT_V1, topic=three)
    again = discover_family("shop", settings, at=at(12, 15))
    assert again.new == [] and again.schemas == [three]
    assert load_table(f"{prefix}_three", settings).columns.keys() == first.columns.keys()


def produce_values(bootstrap: str, topic: str, values: list[bytes]) -> list[Any]:
    return produce(bootstrap, topic, [Message(0, v, None, None) for v in values])
