"""A family's members as recorded by discovery: topic -> its table, when it was found, and
when it went away (retired).

The record (``<state>/_families/<family>/members.json``) is the only place the DAG files learn
about a family's tables: reading it costs one state read per family per parse, never a broker
call. Discovery replaces it whole (one writer: the family's discovery DAG runs one at a time).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from tidemark.state.storage import Location, read_json, replace_atomically

if TYPE_CHECKING:
    from tidemark.settings import Settings

log = logging.getLogger(__name__)

FAMILIES_DIR = "_families"  # under the state store; table names start with a letter


@dataclass(frozen=True)
class Member:
    topic: str
    table: str
    discovered_at: str
    retired_at: str | None = None
    missing_since: str | None = None  # absent from the broker's list since (not retired yet)
    # ``schema: from_registry``: the columns its subject's latest schema reads into, and that
    # schema's id (read again by each discovery; a new id updates the columns)
    columns: dict[str, str] | None = None
    schema_id: int | None = None
    done_at: str | None = None  # retired, and every hour published (``family.retirement``)


@dataclass
class Members:
    """The recorded members of one family."""

    family: str
    topics: dict[str, Member] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "topics": {t: vars(m) for t, m in sorted(self.topics.items())}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Members:
        return cls(data["family"], {t: Member(**m) for t, m in data.get("topics", {}).items()})


def members_file(settings: Settings, family: str) -> Location:
    return Location(settings.state_location) / FAMILIES_DIR / family / "members.json"


def read_members(settings: Settings, family: str) -> Members:
    data = read_json(members_file(settings, family))
    return Members.from_json(data) if data else Members(family)


def table_name(template: str, topic: str) -> str:
    """The table of ``topic``: the template with ``{topic}`` as the topic's name lower-cased,
    every character other than a-z, 0-9 and _ made ``_``."""
    return template.replace("{topic}", re.sub(r"[^a-z0-9_]", "_", topic.lower()))


def unique_table_name(template: str, topic: str, taken: set[str]) -> str:
    """:func:`table_name`, unless a member already holds it (``clicks.eu-west`` and
    ``clicks.eu_west`` both read ``clicks_eu_west``): then with 8 hex digits of the exact
    topic name's hash, so two topics never share one table's state (commit log, lock, files)."""
    name = table_name(template, topic)
    if name not in taken:
        return name
    return f"{name}_{hashlib.sha256(topic.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class Discovered:
    """What one discovery changed."""

    family: str
    new: list[str]
    retired: list[str]
    returned: list[str]
    members: int
    schemas: list[str] = field(default_factory=list)  # members whose columns changed
    done: list[str] = field(default_factory=list)  # retired members with every hour published

    def to_json(self) -> dict[str, Any]:
        return vars(self)


def reconcile(
    members: Members, template: str, present: Iterable[str], at: datetime, retire_after: timedelta
) -> Discovered:
    """Fold the matching topics present on the broker into ``members`` (changed in place): a
    new topic becomes a member; a member whose topic has been absent from every listing for
    ``retire_after`` is retired (one listing that misses a topic, a broker's hiccup, retires
    nothing); a retired member whose topic is back is active again."""
    present = set(present)
    new, retired, returned = [], [], []
    taken = {m.table for m in members.topics.values()}
    for topic in sorted(present - set(members.topics)):
        name = unique_table_name(template, topic, taken)
        if name != table_name(template, topic):
            log.warning(
                "family %s: topic %s reads as table %s, which another topic's table holds: its table is %s",
                members.family,
                topic,
                table_name(template, topic),
                name,
            )
        taken.add(name)
        members.topics[topic] = Member(topic, name, at.isoformat())
        new.append(topic)
    for topic, member in sorted(members.topics.items()):
        if topic in present:
            if member.retired_at is not None:
                returned.append(topic)
            members.topics[topic] = replace(member, retired_at=None, missing_since=None, done_at=None)
        elif member.retired_at is None:
            since = member.missing_since or at.isoformat()
            if at - datetime.fromisoformat(since) >= retire_after:
                members.topics[topic] = replace(member, retired_at=at.isoformat(), missing_since=None)
                retired.append(topic)
            else:
                members.topics[topic] = replace(member, missing_since=since)
    active = sum(1 for m in members.topics.values() if m.retired_at is None)
    return Discovered(members.family, new, retired, returned, active)


def record_members(settings: Settings, members: Members) -> None:
    replace_atomically(members_file(settings, members.family), members.to_json())
