"""Topic families: the family YAML, its members' table configs, and how discovery folds the
broker's listing into the members record (new, missing, retired, back)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from tests.helpers.families import T0, family_file, two_families_claiming_one_table
from tidemark.catalog import table_configs
from tidemark.catalog.families import load_family, member_config
from tidemark.catalog.family_members import Member, Members, reconcile, table_name
from tidemark.errors import ConfigError

pytestmark = pytest.mark.unit


def test_a_members_table_is_the_template_with_its_topic_and_a_retired_member_reads_no_broker(
    tmp_path: Path,
) -> None:
    family = load_family(family_file(tmp_path))
    assert family.matches("clicks.web") and not family.matches("clicks") and not family.matches("views.web")
    assert table_name(family.table_template, "clicks.Web-EU") == "clicks_clicks_web_eu"
    config = member_config(family, Member("clicks.web", "clicks_clicks_web", T0.isoformat()))
    assert (config.table, config.source.topic, config.family, config.source.retired) == (
        "clicks_clicks_web",
        "clicks.web",
        "clicks",
        False,
    )
    retired = member_config(family, Member("clicks.web", "clicks_clicks_web", "", retired_at=T0.isoformat()))
    assert retired.source.retired


def test_a_family_yaml_names_every_mistake(tmp_path: Path) -> None:
    path = family_file(tmp_path, table="clicks", family="other")
    data = yaml.safe_load(path.read_text())
    data["source"]["topic_pattern"] = "clicks.(["
    data["source"]["topic"] = "x"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as error:
        load_family(path)
    text = str(error.value)
    for expected in (
        "family: 'other'",
        "table: 'clicks'",
        "source.topic:",
        "source.topic_pattern: not a regular",
    ):
        assert expected in text
    # the template is checked as a table: a typo in a type is found before any member exists
    bad = family_file(tmp_path, schema={"id": "strin", "event_time": "timestamp"})
    with pytest.raises(ConfigError, match="strin"):
        load_family(bad)


def test_discovery_adds_new_topics_retires_after_the_grace_and_takes_back_a_returning_topic() -> None:
    members = Members("clicks")
    grace = timedelta(hours=1)
    first = reconcile(members, "c_{topic}", ["a", "b"], T0, grace)
    assert (first.new, first.retired, first.members) == (["a", "b"], [], 2)
    # b is missing from one listing: not retired yet (a broker's hiccup retires nothing)
    blip = reconcile(members, "c_{topic}", ["a"], T0 + timedelta(minutes=15), grace)
    assert (
        blip.retired == [] and members.topics["b"].missing_since == (T0 + timedelta(minutes=15)).isoformat()
    )
    back_soon = reconcile(members, "c_{topic}", ["a", "b"], T0 + timedelta(minutes=30), grace)
    assert back_soon.returned == [] and members.topics["b"].missing_since is None
    # missing for the whole grace: retired once
    reconcile(members, "c_{topic}", ["a"], T0 + timedelta(hours=2), grace)
    gone = reconcile(members, "c_{topic}", ["a"], T0 + timedelta(hours=3), grace)
    assert gone.retired == ["b"] and members.topics["b"].retired_at == (T0 + timedelta(hours=3)).isoformat()
    assert reconcile(members, "c_{topic}", ["a"], T0 + timedelta(hours=4), grace).retired == []
    members.topics["b"] = replace(members.topics["b"], done_at=(T0 + timedelta(hours=4)).isoformat())
    back = reconcile(members, "c_{topic}", ["a", "b", "c"], T0 + timedelta(hours=5), grace)
    assert (back.new, back.returned, back.members) == (["c"], ["b"], 3)
    assert members.topics["b"].retired_at is None and members.topics["b"].table == "c_b"
    assert members.topics["b"].done_at is None  # a done member whose topic is back runs again
    assert Members.from_json(members.to_json()) == members


def test_a_registry_family_needs_its_registry_and_gives_each_member_its_own_columns(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"from_registry needs source\.schema_registry"):
        load_family(family_file(tmp_path, schema="from_registry"))
    path = family_file(tmp_path, schema="from_registry")
    data = yaml.safe_load(path.read_text())
    data["source"].update({"format": "avro", "schema_registry": {"url": "http://registry:8081"}})
    data["source"].pop("conversions", None)
    path.write_text(yaml.safe_dump(data))
    family = load_family(path)
    assert family.schema_from_registry and family.subject("clicks.web") == "clicks.web-value"
    with pytest.raises(ConfigError, match=r"no columns read from subject clicks\.web-value yet"):
        member_config(family, Member("clicks.web", "clicks_clicks_web", ""))
    columns = {"event_id": "string", "event_type": "string", "event_time": "timestamp", "extra": "int"}
    config = member_config(
        family, Member("clicks.web", "clicks_clicks_web", "", columns=columns, schema_id=3)
    )
    assert list(config.columns) == list(columns) and config.source.subject == "clicks.web-value"


def test_topics_that_read_as_one_table_name_get_tables_of_their_own() -> None:
    """``clicks.eu-west``, ``clicks.eu_west`` and ``clicks.EU_west`` all normalise to
    ``c_clicks_eu_west``: sharing it would share one commit log, lock and set of files."""
    members = Members("clicks")
    topics = ["clicks.eu-west", "clicks.eu_west", "clicks.EU_west"]
    reconcile(members, "c_{topic}", topics[:1], T0, timedelta(hours=1))
    reconcile(members, "c_{topic}", topics, T0 + timedelta(minutes=5), timedelta(hours=1))
    tables = {t: members.topics[t].table for t in topics}
    assert tables["clicks.eu-west"] == "c_clicks_eu_west"  # the first keeps the readable name
    assert len(set(tables.values())) == 3, tables
    assert all(name.startswith("c_clicks_eu_west_") for t, name in tables.items() if t != "clicks.eu-west")
    again = reconcile(members, "c_{topic}", topics, T0 + timedelta(minutes=10), timedelta(hours=1))
    assert again.new == [] and {t: members.topics[t].table for t in topics} == tables  # stable


def test_two_families_whose_topics_read_as_one_table_keep_it_for_the_first(tmp_path: Path) -> None:
    settings = two_families_claiming_one_table(tmp_path)
    configs, problems = table_configs(settings)
    assert [(c.table, c.source.topic) for c in configs] == [("t_clicks_eu", "clicks.eu")]
    (problem,) = problems.values()
    assert "'clicks_eu'" in problem and "'clicks.eu'" in problem and "one table per topic" in problem
