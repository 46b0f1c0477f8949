"""The operator's commands about a fleet's membership, each an audit record: ``family forget``
(a done member of a family) and ``group join`` / ``group leave`` (see ``group.roster``)."""

from __future__ import annotations

import argparse
from typing import Any


def add_fleet_commands(sub: Any, decision_arguments: Any) -> None:
    """``tidemark family ...`` and ``tidemark group ...`` on the CLI's subparsers."""
    family = sub.add_parser(
        "family",
        help="a topic family's members: forget a done one",
        description="A member whose topic is gone is retired; once every hour up to its last record is "
        "published, discovery marks it done (no DAGs, no runs). forget drops a done member from the "
        "family's record, with an audit record in its table's audit log; its data and state stay.",
    )
    family.add_argument("action", choices=["forget"])
    family.add_argument("--family", required=True)
    family.add_argument("--topic", required=True)
    decision_arguments(family)
    family.set_defaults(func=cmd_family)

    group = sub.add_parser(
        "group",
        help="a group's members: join a table, or record that one left",
        description="A group's barrier compares its hours across its tables, so who is in the group is a "
        "record: a table whose YAML starts naming the group holds the barrier until it joins; a member no "
        "config names any more holds it until mended, or until it leaves. Each is kept in the group's "
        "audit log.",
    )
    group.add_argument("action", choices=["join", "leave", "show"])
    group.add_argument("--group", required=True)
    group.add_argument("--table", help="join, leave: the table")
    group.add_argument("--reason", help="join, leave: why (kept in the group's audit log)")
    group.add_argument("--by", help="who decides (default: the current user)")
    group.set_defaults(func=cmd_group)


def cmd_family(args: argparse.Namespace) -> int:
    import getpass
    from datetime import UTC, datetime

    from tidemark.family.retirement import forget_member
    from tidemark.settings import Settings

    record = forget_member(
        args.family,
        args.topic,
        Settings.from_env(),
        reason=args.reason,
        by=args.by or getpass.getuser(),
        at=datetime.now(UTC),  # the decision's wall clock, for the audit record
    )
    print(f"family {args.family}: topic {args.topic} forgotten; recorded {record.describe()}")
    return 0


def cmd_group(args: argparse.Namespace) -> int:
    import getpass
    import json
    from datetime import UTC, datetime

    from tidemark.errors import MembershipError
    from tidemark.group.roster import group_audit, join_group, leave_group, roster
    from tidemark.settings import Settings

    settings = Settings.from_env()
    if args.action == "show":
        members = roster(settings, args.group)
        print(json.dumps({"group": args.group, "members": members}, indent=2))
        for record in group_audit(settings, args.group).records():
            print(record.describe())
        return 0
    if not args.table or not args.reason:
        raise MembershipError(f"group {args.group}: {args.action} needs --table and --reason")
    change = join_group if args.action == "join" else leave_group
    record = change(
        args.group,
        args.table,
        settings,
        reason=args.reason,
        by=args.by or getpass.getuser(),
        at=datetime.now(UTC),  # the decision's wall clock, for the audit record
    )
    print(f"group {args.group}: {args.table} {args.action}s; recorded {record.describe()}")
    return 0
