"""Announcing sealed hours as Airflow Asset events with partition keys, exactly once.

Airflow stores a task's outlet events only when the task succeeds, and clearing a successful
task would run it again; so "exactly once" cannot come from the task alone. The journal says
what was sealed or amended (each entry has a sequence number and a version per hour); the
announce task reads the table asset's recent events (as an inlet) and emits only the
(hour, version) pairs Airflow does not hold yet. Entries seen in Airflow's events move the
``announced`` pointer forward, so the window read stays small.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from tidemark.config import TableConfig
from tidemark.faults import crash_point
from tidemark.settings import Settings
from tidemark.state.journal import JournalEntry
from tidemark.state.layout import table_uri
from tidemark.table import Table

log = logging.getLogger(__name__)

LOOKBACK_SLACK = timedelta(minutes=5)


def table_asset(config: TableConfig, settings: Settings) -> Any:
    """The Airflow Asset of a table; events carry the hour as ``partition_key``."""
    from airflow.sdk import Asset

    return Asset(
        name=f"tidemark.{config.table}", uri=table_uri(settings.warehouse, config.table), group="tidemark"
    )


def latest_versions(entries: Iterable[JournalEntry]) -> dict[str, int]:
    """Hour -> the newest published version among the entries (an amend supersedes the seal;
    a quarantined hour is not published until it is released)."""
    versions: dict[str, int] = {}
    for entry in entries:
        if entry.published:
            versions[entry.hour] = max(versions.get(entry.hour, 0), entry.version)
    return versions


def already_announced(events: Iterable[Any]) -> set[tuple[str, int]]:
    """(hour, version) pairs present in Airflow's events of the asset."""
    return {(hour, int(version)) for hour, version in announced_pairs(events, "versions")}


def announced_pairs(events: Iterable[Any], field: str) -> set[tuple[str, Any]]:
    """(partition key, ``extra[field][key]``) of each event that carries its key's value."""
    seen = set()
    for event in events:
        key = getattr(event, "partition_key", None)
        values = (getattr(event, "extra", None) or {}).get(field, {})
        if key and key in values:
            seen.add((key, values[key]))
    return seen


def announce_sealed(
    config: TableConfig, settings: Settings, *, outlet_events: Any, inlet_events: Any, run_id: str
) -> list[str]:
    """Emit one Asset event per hour sealed or amended since the last confirmed announcement."""
    journal = Table.read(config, settings).state.journal
    pending = list(journal.entries(journal.announced_through() + 1))
    if not pending:
        log.info("%s: nothing new to announce", config.table)
        return []
    asset = table_asset(config, settings)
    since = min(datetime.fromisoformat(e.sealed_at) for e in pending) - LOOKBACK_SLACK
    seen = already_announced(inlet_events[asset].after(since.isoformat()))
    versions = latest_versions(pending)
    todo = {hour: v for hour, v in versions.items() if (hour, v) not in seen}

    def settled(entry: JournalEntry) -> bool:  # nothing (more) to announce for this entry
        return not entry.published or (entry.hour, versions[entry.hour]) in seen

    if any(settled(e) for e in pending):
        # Everything up to the last entry before the first one Airflow does not hold yet.
        prefix = next((e.seq - 1 for e in pending if not settled(e)), pending[-1].seq)
        journal.mark_announced(prefix)
    if not todo:
        log.info("%s: all %s pending hours were announced by an earlier attempt", config.table, len(versions))
        journal.mark_announced(pending[-1].seq)
        return []
    crash_point("before_announce")
    accessor = outlet_events[asset]
    accessor.extra = {"table": config.table, "versions": todo, "announced_by_run": run_id}
    accessor.add_partitions(sorted(todo))
    log.info(
        "%s: announcing %s hours on asset %s: %s",
        config.table,
        len(todo),
        asset.name,
        ", ".join(f"{h} v{v}" for h, v in sorted(todo.items())),
    )
    crash_point("after_announce")
    return sorted(todo)
