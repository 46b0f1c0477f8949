"""Discovery: list the broker's topics, fold those matching a family into its members record.

The only place a family talks to the broker; the DAG files and jobs read the record. A new
topic becomes a table at the next DAG-file parse (no deploy); a topic gone for the family's
``retire_after`` retires its table (``source.retired``: its runs read no broker, commit empty
batches, and its hours up to the last record seal as usual); a retired table whose hours are
all published is done (``family.retirement``).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from tidemark.catalog.families import Family, load_family
from tidemark.catalog.family_members import Discovered, Members, read_members, reconcile, record_members
from tidemark.errors import SchemaRegistryUnavailableError
from tidemark.family.retirement import mark_done, members_lock
from tidemark.ingest.kafka import client_properties, list_topics
from tidemark.ingest.registry import SchemaRegistry, UnknownSchemaIdError
from tidemark.ingest.registry_tables import subject_columns

if TYPE_CHECKING:
    from tidemark.settings import Settings

log = logging.getLogger(__name__)


def discover_family(name: str, settings: Settings, *, at: datetime, dry_run: bool = False) -> Discovered:
    """Reconcile family ``name``'s members with the broker's topics as of ``at`` (the run's
    time, not the clock) and record them (not on a dry run)."""

    family = load_family(settings.conf_dir / "families" / f"{name}.yaml")
    conf = client_properties(
        settings.kafka_bootstrap, family.template["source"].get("kafka_properties") or {}
    )
    matching = [t for t in list_topics(conf) if family.matches(t)]
    with members_lock(settings, name).hold(f"discover:{at.isoformat()}", wait=60):
        members = read_members(settings, name)
        found = reconcile(members, family.table_template, matching, at, family.retire_after)
        if family.schema_from_registry:
            found.schemas.extend(read_subjects(family, members))
        found.done.extend(mark_done(family, members, settings, at))
        if not dry_run:
            record_members(settings, members)
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
    if found.schemas:
        log.info("family %s: columns read from the registry for %s", name, ", ".join(found.schemas))
    if found.done:
        log.info(
            "family %s: retired topics done (every hour published; no DAGs from now on; "
            "tidemark family forget drops them): %s",
            name,
            ", ".join(found.done),
        )
    return found


def read_subjects(family: Family, members: Members) -> list[str]:
    """Each active member's columns from its subject's latest schema, where the schema id
    changed (members changed in place; the topics whose columns changed). A subject that
    cannot be read keeps the member's columns (a new member without any has no DAGs until a
    later discovery reads it): logged, never raised, so one topic's subject never stops the
    family's discovery."""

    registry_config = family.template["source"]["schema_registry"]
    properties = {"url": str(registry_config["url"]), **(registry_config.get("properties") or {})}
    changed = []
    for topic, member in sorted(members.topics.items()):
        if member.retired_at is not None:
            continue
        subject = family.subject(topic)
        try:
            latest = SchemaRegistry(member.table, properties).latest(subject)
            if latest.schema_id == member.schema_id:
                continue
            imports: dict[str, str] = {}
            if latest.schema_type == "PROTOBUF":  # as the decoder reads it: a serialized descriptor
                registry = SchemaRegistry(member.table, properties, serialized=True)
                latest = registry.latest(subject)
                imports = registry.imports(latest)
            columns, _ = subject_columns(latest, imports, registry_config.get("message") or None)
        except (SchemaRegistryUnavailableError, UnknownSchemaIdError, ValueError) as exc:
            log.warning("family %s: topic %s: subject %s not read: %s", family.name, topic, subject, exc)
            continue
        members.topics[topic] = replace(member, columns=columns, schema_id=latest.schema_id)
        changed.append(topic)
    return changed
