"""The end of a family member: retired (its topic is gone), then done (every hour up to its last
record is published), then, by an operator's decision, forgotten.

A retired member still runs: each run commits an empty batch so its watermark moves past its
last record and its last hours seal. Once those hours are published there is nothing left to
do, so discovery marks it done (``Member.done_at``): from then on it has no DAGs, runs no job
and is in no group's barrier. ``tidemark family forget`` drops a done member from the family's
record, with an audit record in the table's audit log; its files and state stay where they
are. A topic that comes back is a member again (discovery): a done one runs again, a
forgotten one is found as a new member of the same table, whose first dump stops with
``TopicRecreatedError`` (its offsets started again) until it is rebased.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.catalog.families import load_family, member_config
from tidemark.catalog.family_members import FAMILIES_DIR, Member, Members, read_members, record_members
from tidemark.errors import ConfigError, MembershipError
from tidemark.group.roster import drop_member
from tidemark.seal.due import unfinished_hours
from tidemark.state.locks import TableLock
from tidemark.state.storage import Location
from tidemark.table import Table

if TYPE_CHECKING:
    from tidemark.catalog.families import Family
    from tidemark.settings import Settings
    from tidemark.state.audit import AuditRecord

log = logging.getLogger(__name__)


def members_lock(settings: Settings, family: str) -> TableLock:
    """Serialises the writers of a family's record: discovery and ``family forget``."""
    return TableLock(Location(settings.state_location) / FAMILIES_DIR, family, "members")


def mark_done(family: Family, members: Members, settings: Settings, at: datetime) -> list[str]:
    """Mark each retired member with nothing left to do as done (changed in place); the
    topics marked. A member whose config cannot load is left as it is (logged)."""

    done = []
    for topic, member in sorted(members.topics.items()):
        if member.retired_at is None or member.done_at is not None:
            continue
        try:
            config = member_config(family, member)
            state = Table.read(config, settings).state
            left = unfinished_hours(config, state.commit_log.state(), state.journal.state())
        except ConfigError as exc:
            log.warning("family %s: retired topic %s not checked: %s", family.name, topic, exc)
            continue
        if left:
            log.info(
                "family %s: retired topic %s (table %s) still has hours to publish: %s",
                family.name,
                topic,
                member.table,
                ", ".join(left[:5]) + (" ..." if len(left) > 5 else ""),
            )
            continue
        members.topics[topic] = replace(member, done_at=at.isoformat())
        done.append(topic)
    return done


def forget_member(
    family: str, topic: str, settings: Settings, *, reason: str, by: str, at: datetime
) -> AuditRecord:
    """Drop a done member from the family's record (see the module); the audit record."""
    if not reason.strip():
        raise MembershipError(f"family {family}: forgetting topic {topic} needs a --reason")
    with members_lock(settings, family).hold(f"forget:{topic}", wait=60):
        members = read_members(settings, family)
        member = members.topics.get(topic)
        if member is None:
            known = ", ".join(sorted(members.topics)) or "none"
            raise MembershipError(f"family {family}: no member for topic {topic} (its topics: {known})")
        if member.done_at is None:
            state = "active" if member.retired_at is None else "retired, with hours left to publish"
            raise MembershipError(
                f"family {family}: topic {topic} (table {member.table}) is {state}; only a done member is "
                "forgotten (discovery marks a retired member done once its last hour is published: "
                f"tidemark status --table {member.table})"
            )
        record = Table.state_of(settings.state_location, member.table).audit.append(
            action="forget",
            reason=reason,
            by=by,
            at=at.isoformat(),
            batch_id=None,
            offsets=f"{topic}: every offset committed",
            detail={
                "family": family,
                "topic": topic,
                "retired_at": member.retired_at,
                "done_at": member.done_at,
            },
        )
        group = _group_of(family, member, settings)
        if group is not None:  # its hours no longer hold the group's barrier
            drop_member(group, member.table, settings, reason=f"forgotten: {reason}", by=by, at=at)
        del members.topics[topic]
        record_members(settings, members)
    log.info("family %s: topic %s (table %s) forgotten by %s: %s", family, topic, member.table, by, reason)
    return record


def _group_of(family: str, member: Member, settings: Settings) -> str | None:
    """The group a member's config names (None: none, or the family YAML does not load)."""

    try:
        return member_config(load_family(settings.conf_dir / "families" / f"{family}.yaml"), member).group
    except ConfigError:
        return None
