"""Who is in a group, as a record: joining and leaving are decisions, each with an audit record.

The barrier compares a group's hours across its tables, so the set of tables is part of every
announcement. A YAML that stops naming the group (or is deleted) must not silently shrink the
group: hours that table never published would look complete. So the group keeps its roster
(``<state>/_groups/<group>/roster.json``) and an audit log beside it:

- the first announce of a group records the tables naming it then (``form``);
- a table YAML that names the group later *holds* the barrier until ``tidemark group join``;
  a family's member joins when the barrier first sees it (the family's discovery found it);
- a member that no runnable config names any more holds the barrier until it is mended or
  ``tidemark group leave`` records its leaving; a family member that is done (every hour
  published) or forgotten leaves by itself.

Leaving never re-announces an hour (``barrier``); joining adds the table's hours to the hours
announced from then on.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.errors import MembershipError
from tidemark.group.members import GROUPS_DIR, group_members, group_state_dir
from tidemark.state.audit import AuditLog, AuditRecord
from tidemark.state.locks import TableLock
from tidemark.state.storage import Location, read_json, replace_atomically

if TYPE_CHECKING:
    from tidemark.config import TableConfig
    from tidemark.settings import Settings

log = logging.getLogger(__name__)


def _roster_file(settings: Settings, group: str) -> Location:
    return group_state_dir(settings, group) / "roster.json"


def group_audit(settings: Settings, group: str) -> AuditLog:
    """The group's decisions (form, join, leave), as a table's audit log holds a table's."""
    return AuditLog(Location(settings.state_location) / GROUPS_DIR, group)


def _lock(settings: Settings, group: str) -> TableLock:
    return TableLock(Location(settings.state_location) / GROUPS_DIR, group, "roster")


def roster(settings: Settings, group: str) -> dict[str, dict[str, Any]] | None:
    """Table -> how it joined; None before the group's first announce."""
    data = read_json(_roster_file(settings, group))
    return None if data is None else dict(data.get("members", {}))


def _change(settings: Settings, group: str, members: dict[str, dict[str, Any]], **audit: Any) -> AuditRecord:
    record = group_audit(settings, group).append(batch_id=None, **audit)
    replace_atomically(
        _roster_file(settings, group), {"group": group, "members": dict(sorted(members.items()))}
    )
    return record


def roster_holds(
    group: str, configs: list[TableConfig], settings: Settings, *, every: list[TableConfig], at: datetime
) -> dict[str, str]:
    """The tables that hold ``group``'s barrier because of membership (table -> why), after
    recording what needs no decision (see the module). ``configs``: the group's runnable
    tables; ``every``: every table config that loads (a done family member included)."""
    by_table = {c.table: c for c in every}
    with _lock(settings, group).hold(f"roster:{at.isoformat()}", wait=60):
        members = roster(settings, group)
        if members is None:
            formed = {c.table: {"since": at.isoformat(), "by": "form"} for c in configs}
            _change(
                settings,
                group,
                formed,
                action="form",
                reason="the group's first announce",
                by="tidemark",
                at=at.isoformat(),
                offsets=", ".join(sorted(formed)),
            )
            log.info("group %s: formed with %s", group, ", ".join(sorted(formed)))
            return {}
        held: dict[str, str] = {}
        for config in configs:
            if config.table in members:
                continue
            if config.family:
                members[config.table] = {"since": at.isoformat(), "by": f"family {config.family}"}
                _change(
                    settings,
                    group,
                    members,
                    action="join",
                    reason=f"found by family {config.family}'s discovery",
                    by=f"family {config.family}",
                    at=at.isoformat(),
                    offsets=config.table,
                )
                continue
            held[config.table] = (
                f"{config.table} names group {group} but has not joined it: its hours would change what was "
                f"announced. Run: tidemark group join --group {group} --table {config.table} --reason ..."
            )
        runnable = {c.table for c in configs}
        for table in sorted(set(members) - runnable):
            gone = by_table.get(table)
            if gone is not None and gone.family and gone.source.done:
                del members[table]
                _change(
                    settings,
                    group,
                    members,
                    action="leave",
                    reason="every hour published (done)",
                    by=f"family {gone.family}",
                    at=at.isoformat(),
                    offsets=table,
                )
                continue
            held[table] = (
                f"{table} is a member of group {group} but no runnable table config names the group any more "
                f"(its YAML was changed, moved or broke): mend it, or run: tidemark group leave --group {group} "
                f"--table {table} --reason ..."
            )
    return held


def join_group(
    group: str, table: str, settings: Settings, *, reason: str, by: str, at: datetime
) -> AuditRecord:
    """Record ``table`` (a runnable table naming ``group``) as a member from now on."""

    if not reason.strip():
        raise MembershipError(f"group {group}: joining {table} needs a --reason")
    if table not in {c.table for c in group_members(group, settings)}:
        raise MembershipError(
            f"group {group}: {table} is not a runnable table naming the group: set `group: {group}` in its YAML "
            f"(tidemark tables validate) first"
        )
    with _lock(settings, group).hold(f"join:{table}", wait=60):
        members = roster(settings, group) or {}
        if table in members:
            raise MembershipError(
                f"group {group}: {table} is a member already (since {members[table]['since']})"
            )
        members[table] = {"since": at.isoformat(), "by": by}
        return _change(
            settings, group, members, action="join", reason=reason, by=by, at=at.isoformat(), offsets=table
        )


def leave_group(
    group: str, table: str, settings: Settings, *, reason: str, by: str, at: datetime
) -> AuditRecord:
    """Record that ``table`` left ``group``: its hours no longer hold the group's barrier."""

    if not reason.strip():
        raise MembershipError(f"group {group}: {table} leaving needs a --reason")
    if table in {c.table for c in group_members(group, settings)}:
        raise MembershipError(
            f"group {group}: {table}'s config still names the group: remove `group: {group}` from it first"
        )
    left = drop_member(group, table, settings, reason=reason, by=by, at=at)
    if left is None:
        known = ", ".join(sorted(roster(settings, group) or {})) or "none"
        raise MembershipError(f"group {group}: {table} is not a member (members: {known})")
    return left


def drop_member(
    group: str, table: str, settings: Settings, *, reason: str, by: str, at: datetime
) -> AuditRecord | None:
    """Take ``table`` off ``group``'s roster with an audit record (None: it was not on it).
    ``leave_group`` checks the decision first; a forgotten family member comes here directly."""
    with _lock(settings, group).hold(f"leave:{table}", wait=60):
        members = roster(settings, group) or {}
        if table not in members:
            return None
        del members[table]
        return _change(
            settings, group, members, action="leave", reason=reason, by=by, at=at.isoformat(), offsets=table
        )
