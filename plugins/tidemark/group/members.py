"""Which tables form a group, and what they must agree on.

A group runs on one schedule and its hours are compared by key across its tables, so the
tables of a group share ``schedule`` and ``event_time.time_zone``. The group's first table by
name sets them (and the DAG's owner, retries and retry delay); a table that disagrees is
refused alone, with a problem naming the group and the table it disagrees with.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.catalog import table_configs
from tidemark.errors import ConfigError
from tidemark.state.layout import table_uri
from tidemark.state.storage import Location

if TYPE_CHECKING:
    from tidemark.config import TableConfig
    from tidemark.settings import Settings

GROUPS_DIR = "_groups"  # under the state store; table names start with a letter


def groups_of(configs: list[TableConfig]) -> dict[str, list[TableConfig]]:
    """Group name -> its tables, sorted by name (tables without a group are left out)."""
    groups: dict[str, list[TableConfig]] = defaultdict(list)
    for config in sorted(configs, key=lambda c: c.table):
        if config.group is not None:
            groups[config.group].append(config)
    return dict(groups)


def disagreements(configs: list[TableConfig]) -> list[tuple[str, str]]:
    """(table, problem) of each grouped table whose schedule or time zone differs from its
    group's first table's."""
    problems = []
    for group, tables in groups_of(configs).items():
        first = tables[0]
        for config in tables[1:]:
            for what, mine, theirs in (
                ("schedule", config.schedule, first.schedule),
                ("event_time.time_zone", config.event_time.time_zone, first.event_time.time_zone),
            ):
                if mine != theirs:
                    problems.append(
                        (
                            config.table,
                            f"{config.table}: group {group!r} runs with {what} {theirs!r} (from its first "
                            f"table {first.table!r}); this table has {mine!r}. Use the same {what}, or "
                            "another group",
                        )
                    )
    return problems


Loaded = tuple[list["TableConfig"], dict[str, str]]  # table_configs(): the configs, and the problems


def group_members(group: str, settings: Settings, loaded: Loaded | None = None) -> list[TableConfig]:
    """The tables of ``group`` that can run: every valid table YAML (or family member) naming
    it that agrees with the group (a broken or disagreeing table is left out: the DAG files
    show why). ``loaded``: the configs already read by the caller (else read here)."""

    configs, _ = loaded or table_configs(settings)
    refused = {table for table, _ in disagreements(configs)}
    return [c for c in groups_of(configs).get(group, []) if c.table not in refused and not c.source.done]


def unloadable_members(group: str, settings: Settings, loaded: Loaded | None = None) -> dict[str, str]:
    """Members of ``group`` that cannot run (where -> why): a table YAML naming the group that
    fails to load, or a table that disagrees with its group. They hold the group's barrier
    (``barrier.announce_group``): absent is not the same as published."""

    configs, problems = loaded or table_configs(settings)
    disagree = dict(disagreements(configs))
    held = {c.table: disagree[c.table] for c in configs if c.group == group and c.table in disagree}
    for where, why in problems.items():
        path = Path(where)  # a table file (a family member's problem names its family instead)
        try:
            text = path.read_text(encoding="utf-8") if path.is_file() else ""
        except OSError:
            continue
        named = re.search(r"^group:\s*['\"]?([A-Za-z0-9_]+)", text, re.MULTILINE)
        if named and named.group(1) == group:
            held[where] = why
    return held


def group_state_dir(settings: Settings, group: str) -> Location:
    """The group's own records (its announced hours), beside the tables' state."""
    return Location(settings.state_location) / GROUPS_DIR / group


def group_asset(group: str, settings: Settings) -> Any:
    """The Airflow Asset of a group: one event per hour every table of the group has sealed,
    with the hour as ``partition_key`` (the cross-table barrier)."""
    from airflow.sdk import Asset

    return Asset(
        name=f"tidemark.group.{group}",
        uri=table_uri(settings.warehouse, f"{GROUPS_DIR}/{group}"),
        group="tidemark",
    )


def select_members(group: str, settings: Settings, tables: str = "") -> list[TableConfig]:
    """The group's tables, or only those named (comma-separated): a name that is not a
    runnable table of the group is a ConfigError naming the group's tables."""

    members = group_members(group, settings)
    wanted = [t.strip() for t in tables.split(",") if t.strip()]
    if not wanted:
        if not members:
            raise ConfigError(f"group {group}", ["no runnable table names this group"])
        return members
    known = {c.table: c for c in members}
    unknown = [t for t in wanted if t not in known]
    if unknown:
        raise ConfigError(
            f"group {group}",
            [
                f"{', '.join(unknown)}: not a runnable table of the group (its tables: {', '.join(known) or 'none'})"
            ],
        )
    return [known[t] for t in wanted]
