"""A family's YAML and the table configs of its recorded members.

``<conf dir>/families/<family>.yaml`` is a table YAML whose ``table`` is a template with
``{topic}`` and whose ``source`` names ``topic_pattern`` (a regular expression the whole
topic name must match) instead of ``topic``; ``discovery_schedule`` (default every 15
minutes) is the discovery DAG's, and a member whose topic is absent from every listing for
``retire_after`` (default 1h) is retired. In ``source.schema_registry.subject``, ``{topic}``
is the member's topic; ``schema: from_registry`` gives each member the columns of its own
subject's latest schema (read by discovery, recorded with the member). Each member is that
YAML with its table and topic filled in; a member whose topic went away is
``source.retired``.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tidemark.catalog.family_members import Member, read_members, table_name
from tidemark.config import parse_table
from tidemark.config.source import read_schema_files
from tidemark.durations import parse_duration
from tidemark.errors import ConfigError
from tidemark.state.commitlog import bound_topic_of

if TYPE_CHECKING:
    from tidemark.config import TableConfig
    from tidemark.settings import Settings

DEFAULT_DISCOVERY_SCHEDULE = "*/15 * * * *"
DEFAULT_RETIRE_AFTER = "1h"
FROM_REGISTRY = "from_registry"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


@dataclass(frozen=True)
class Family:
    name: str
    path: Path
    table_template: str
    pattern: re.Pattern[str]
    discovery_schedule: str
    retire_after: timedelta
    template: dict[str, Any]  # the table YAML, less the family's own keys

    @property
    def schema_from_registry(self) -> bool:
        """``schema: from_registry``: each member's columns from its own subject's schema."""
        return self.template.get("schema") == FROM_REGISTRY

    def subject(self, topic: str) -> str:
        registry = self.template["source"].get("schema_registry") or {}
        return str(registry.get("subject") or "{topic}-value").replace("{topic}", topic)

    def matches(self, topic: str) -> bool:
        return self.pattern.fullmatch(topic) is not None


def origin(config: TableConfig, settings: Settings) -> str:
    """Where a table's config comes from, as problems and listings name it: its YAML file,
    or its family and topic."""
    if config.family:
        return f"family {config.family} (topic {config.source.topic})"
    return str(settings.conf_dir / f"{config.table}.yaml")


def family_files(settings: Settings) -> list[Path]:
    return sorted((settings.conf_dir / "families").glob("*.yaml"))


def load_family(path: Path) -> Family:
    """Read and check a family YAML: its keys, its pattern, and a member made from it."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"(top level): not valid YAML: {exc}"]) from None
    if not isinstance(data, dict) or not isinstance(data.get("source"), dict):
        raise ConfigError(str(path), ["(top level): expected a table YAML with family, table and source"])
    data = copy.deepcopy(data)
    problems = []
    name = str(data.pop("family", ""))
    if name != path.stem or not _NAME.match(name):
        problems.append(f"family: {name!r} must be a lower-case name equal to the file name {path.stem!r}")
    template = str(data.get("table", ""))
    if "{topic}" not in template:
        problems.append(f"table: {template!r} must be a template holding {{topic}}, e.g. clicks_{{topic}}")
    schedule = str(data.pop("discovery_schedule", DEFAULT_DISCOVERY_SCHEDULE))
    try:
        retire_after = parse_duration(str(data.pop("retire_after", DEFAULT_RETIRE_AFTER)))
    except ValueError as exc:
        problems.append(f"retire_after: {exc}")
        retire_after = timedelta(hours=1)
    source = data["source"]
    if "topic" in source:
        problems.append("source.topic: a family's topics are found by source.topic_pattern; remove topic")
    try:
        pattern = re.compile(str(source.pop("topic_pattern", "")) or "(?!)")
    except re.error as exc:
        problems.append(f"source.topic_pattern: not a regular expression: {exc}")
        pattern = re.compile("(?!)")
    if pattern.pattern == "(?!)":
        problems.append("source.topic_pattern: required, e.g. 'clicks\\..+'")
    if data.get("schema") == FROM_REGISTRY and not isinstance(source.get("schema_registry"), dict):
        problems.append(
            "schema: from_registry needs source.schema_registry (its url; subject default {topic}-value)"
        )
    if problems:
        raise ConfigError(str(path), problems)
    family = Family(name, path, template, pattern, schedule, retire_after, data)
    if not family.schema_from_registry:  # else each member is checked with its own columns
        member_config(family, Member("example_topic", table_name(template, "example_topic"), ""))
    return family


def member_config(family: Family, member: Member) -> TableConfig:
    """The table config of one member (a ConfigError names the family file and the topic)."""

    data = copy.deepcopy(family.template)
    where = f"{family.path} (topic {member.topic})"
    if family.schema_from_registry:
        if not member.columns:
            raise ConfigError(
                where, [f"schema: no columns read from subject {family.subject(member.topic)} yet"]
            )
        data["schema"] = dict(member.columns)
    data["table"] = member.table
    data["family"] = family.name
    source = data["source"]
    source["topic"] = member.topic
    if member.retired_at is not None:
        source["retired"] = True
        source["done"] = member.done_at is not None
    registry = source.get("schema_registry")
    if isinstance(registry, dict) and isinstance(registry.get("subject"), str):
        registry["subject"] = registry["subject"].replace("{topic}", member.topic)
    return parse_table(read_schema_files(data, where, family.path.parent), where)


def family_tables(settings: Settings) -> tuple[list[TableConfig], dict[str, str]]:
    """The tables of every family's recorded members, and for each family file or member that
    cannot run, why (one family's mistake never takes other tables with it). A table name two
    families' topics claim belongs to the topic its commit log is bound to (``claimant``);
    the other claims are refused, never a silent takeover."""
    configs: list[TableConfig] = []
    problems: dict[str, str] = {}
    for path in family_files(settings):
        try:
            family = load_family(path)
        except ConfigError as exc:
            problems[str(path)] = str(exc)
            continue
        for topic, member in sorted(read_members(settings, family.name).topics.items()):
            try:
                configs.append(member_config(family, member))
            except ConfigError as exc:
                problems[f"{path} (topic {topic})"] = str(exc)
    by_table: dict[str, list[TableConfig]] = {}
    for config in configs:
        by_table.setdefault(config.table, []).append(config)
    held = []
    for name, claims in by_table.items():
        holder = claimant(claims, settings)
        held.append(holder)
        for other in claims:
            if other is not holder:
                where = origin(other, settings)
                problems[where] = str(
                    ConfigError(
                        where,
                        [
                            f"table {name!r} of topic {other.source.topic!r} is already the table of topic "
                            f"{holder.source.topic!r} ({origin(holder, settings)}): one table per topic; "
                            "narrow one family's pattern or change its table template"
                        ],
                    )
                )
    holders = {id(c) for c in held}
    return [c for c in configs if id(c) in holders], problems


def claimant(claims: list[TableConfig], settings: Settings) -> TableConfig:
    """Which of the configs that name one table holds it: the one whose topic the table's
    commit log is bound to (it has read that topic), else, for a table that never planned,
    the first (by family file and topic)."""
    if len(claims) == 1:
        return claims[0]
    bound = bound_topic_of(settings.state_location, claims[0].table)
    return next((c for c in claims if c.source.topic == bound), claims[0])


def find_member(name: str, settings: Settings) -> TableConfig | None:
    """The config of family member table ``name``, if a family recorded one (its holder, when
    two families' topics claim the name)."""
    claims = []
    for path in family_files(settings):
        try:
            family = load_family(path)
        except ConfigError:
            continue
        for member in read_members(settings, family.name).topics.values():
            if member.table == name:
                claims.append(member_config(family, member))
    return claimant(claims, settings) if claims else None
