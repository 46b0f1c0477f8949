"""Discovery: list the broker's topics, fold those matching a family into its members record.

The only place a family talks to the broker; the DAG files and jobs read the record. A new
topic becomes a table at the next DAG-file parse (no deploy); a topic gone for the family's
``retire_after`` retires its table (``source.retired``: its runs read no broker, commit empty
batches, and its hours up to the last record seal as usual).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.family.members import Discovered, read_members, reconcile, record_members
from tidemark.family.tables import load_family

if TYPE_CHECKING:
    from tidemark.settings import Settings

log = logging.getLogger(__name__)


def discover_family(name: str, settings: Settings, *, at: datetime, dry_run: bool = False) -> Discovered:
    """Reconcile family ``name``'s members with the broker's topics as of ``at`` (the run's
    time, not the clock) and record them (not on a dry run)."""
    from tidemark.ingest.kafka import client_properties, list_topics

    family = load_family(settings.conf_dir / "families" / f"{name}.yaml")
    conf = client_properties(
        settings.kafka_bootstrap, family.template["source"].get("kafka_properties") or {}
    )
    matching = [t for t in list_topics(conf) if family.matches(t)]
    members = read_members(settings, name)
    found = reconcile(members, family.table_template, matching, at, family.retire_after)
    missing = sorted(t for t, m in members.topics.items() if m.missing_since)
    log.info(
        "family %s: %s topics match %s; new: %s; retired: %s; back: %s; missing, not retired yet: %s",
        name,
        len(matching),
        family.pattern.pattern,
        ", ".join(found.new) or "none",
        ", ".join(found.retired) or "none",
        ", ".join(found.returned) or "none",
        ", ".join(missing) or "none",
    )
    if not dry_run:
        record_members(settings, members)
    return found
