"""Bulk-load bootstrap: one full read of the source into a snapshot, aligned to the CDC stream.

Alignment is by offsets, not by clocks: *before* the source is read, the end offset of every
MQ partition of the table's CDC topic is recorded in the run's plan. Every change committed
after those offsets is in the increments; a change between the offsets and the read is in
both, which is harmless because merges keep the highest (version, offset) per key. A gap is
impossible. The first merge on top of a bootstrap skips increment rows below the offsets
(those changes are already in the source it read, or were undone there).

Idempotent per run id: the plan (offsets, as-of instant) is written once and reused by
retries; a run whose record exists is a no-op; a crash anywhere before the record leaves the
previous snapshot live and the retry starts the read again.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import BootstrapError
from tidemark.faults import crash_point
from tidemark.ingest.identity import bound_identity, broker_identity, check_binding
from tidemark.ingest.kafka import client_properties, partition_offsets
from tidemark.seal.metastore import quote_identifier
from tidemark.settings import Settings
from tidemark.snapshot.formats import is_versioned, open_versioned, snapshot_lock
from tidemark.snapshot.snapshots import SnapshotLog, SnapshotRecord, SnapshotStore, check_label
from tidemark.snapshot.sources import BootstrapSource, credentials, read_source
from tidemark.table import Table
from tidemark.time.hours import hour_of
from tidemark.time.instants import as_utc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def conform(frame: DataFrame, config: TableConfig, columns: list[tuple[str, str]]) -> DataFrame:
    """The source's columns cast to the snapshot's types (matched case-insensitively); a missing
    column fails naming every one, extra columns are dropped with a log line."""
    from pyspark.sql import functions as F

    by_lower = {c.lower(): c for c in frame.columns}
    missing = [name for name, _ in columns if name.lower() not in by_lower]
    if missing:
        raise BootstrapError(
            f"{config.table}: the source lacks column(s) {', '.join(missing)} of {config.snapshot_table} "
            f"(source columns: {', '.join(frame.columns)})"
        )
    wanted = {name.lower() for name, _ in columns}
    extra = [c for c in frame.columns if c.lower() not in wanted]
    if extra:
        log.info("%s: ignoring source column(s) not in the table: %s", config.table, ", ".join(extra))
    return frame.select(
        *(F.col(quote_identifier(by_lower[name.lower()])).cast(ddl).alias(name) for name, ddl in columns)
    )


@dataclass(frozen=True)
class BootstrapResult:
    table: str
    run_id: str
    label: str
    version: int
    rows: int
    aligned_offsets: dict[str, int]
    increments_from: str
    source: str
    already_done: bool = False
    atomic_swap: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def align(config: TableConfig, settings: Settings) -> dict[str, int]:
    """The end offset of every MQ partition of the CDC topic, now (before the source read)."""
    conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
    commit_log = Table.read(config, settings).state.commit_log
    check_binding(  # the increments' offsets must be the topic the table reads, as it is now
        config,
        bound_identity(commit_log, commit_log.state()),
        broker_identity(conf, config.source.topic),
        what="the bootstrap's alignment",
    )
    ends = {str(p): high for p, (_, high) in partition_offsets(conf, config.source.topic).items()}
    log.info("%s: increments start at offsets %s of topic %s", config.table, ends, config.source.topic)
    return ends


def preview_bootstrap(
    config: TableConfig, settings: Settings, source: BootstrapSource, *, as_of: datetime, label: str = ""
) -> dict[str, Any]:
    """What a bootstrap would do (dry run): the label, the source and today's end offsets."""
    return {
        "table": config.table,
        "dry_run": True,
        "label": check_label(config, label or default_label(as_of)),
        "source": source.describe(),
        "end_offsets_now": align(config, settings),
    }


def default_label(as_of: datetime) -> str:
    return as_of.strftime("%Y-%m-%dT%H%M")


def run_bootstrap(
    spark: SparkSession,
    config: TableConfig,
    settings: Settings,
    run_id: str,
    source: BootstrapSource,
    *,
    as_of: datetime,
    label: str = "",
) -> BootstrapResult:
    """Read ``source`` into snapshot ``label`` aligned to the CDC topic; see the module doc."""
    if config.cdc is None:
        raise BootstrapError(f"{config.table}: not a cdc table (no cdc: section), nothing to bootstrap")
    snapshots = SnapshotLog(settings.state_location, config.table)
    label = check_label(config, label or default_label(as_of))
    versioned = open_versioned(spark, config, settings) if is_versioned(config) else None
    for record in snapshots.records():
        if record.run_id == run_id and record.kind == "bootstrap":
            log.info("%s: run %s already bootstrapped %s; nothing to do", config.table, run_id, record.ref)
            if versioned is not None:  # its job may have died before the views
                with Table.read(config, settings).state.lock(snapshot_lock(config, label)).hold(run_id):
                    versioned.after_commit(snapshots)
            return _result(record, already_done=True)
    store = SnapshotStore(spark, config, settings)
    with Table.read(config, settings).state.lock(snapshot_lock(config, label)).hold(run_id) as lease:
        if versioned is not None:
            for record in versioned.recover(snapshots):
                if record.run_id == run_id:
                    store.drop_staging(label, run_id)
                    versioned.after_commit(snapshots)
                    return _result(record)
        plan = _plan(snapshots, config, settings, run_id, label=label, as_of=as_of, source=source)
        log.info("%s: bootstrap %s of %s from %s", config.table, run_id, label, plan["source"])
        frame = conform(read_source(spark, source, credentials()), config, store.columns())
        if versioned is not None:  # key-ranged files: a MERGE of recent keys rewrites few of them
            frame = frame.orderBy(*(quote_identifier(k) for k in config.primary_key))
        staged = store.stage(
            frame, label, run_id, f"bootstrap {plan['as_of']} {plan['aligned_offsets']}", lease
        )
        crash_point("after_snapshot_staging")
        pending = SnapshotRecord(
            seq=-1,
            table=config.table,
            label=label,
            kind="bootstrap",
            version=0,  # the log assigns the label's next version
            run_id=run_id,
            through=plan["as_of"],
            increments_from=plan["increments_from"],
            rows=staged.rows,
            files=staged.files,
            created_at=datetime.now().astimezone().isoformat(),
            source=plan["source"],
            aligned_offsets=plan["aligned_offsets"],
            location=staged.location,
        )
        lease.check()  # paused past the label's lease: another bootstrap owns it now
        if versioned is not None:  # the table's commit is the swap; the record follows it
            committed = versioned.overwrite(store.staged_uris(staged), replace(pending, location=""))
            crash_point("after_snapshot_swap")
            record = snapshots.append(committed)
            store.drop_staging(label, run_id)
            lease.check()
            versioned.after_commit(snapshots)
            atomic = True
        else:
            atomic = store.publish(staged)
            record = snapshots.append(pending)
            store.discard(staged, record)
    return replace(_result(record), atomic_swap=atomic)


def _plan(
    snapshots: SnapshotLog,
    config: TableConfig,
    settings: Settings,
    run_id: str,
    *,
    label: str,
    as_of: datetime,
    source: BootstrapSource,
) -> dict[str, Any]:
    """The run's plan, saved before the read (a retry reads the same one): the topic's end
    offsets first, then the source."""
    margin = config.watermark.max_out_of_orderness
    plan = snapshots.save_plan(
        run_id,
        {
            "run_id": run_id,
            "label": label,
            "as_of": as_of.isoformat(),
            # Changes after the offsets carry event times from about as_of on; the margin
            # covers their disorder, so the first merge reads every hour they can be in.
            "increments_from": hour_of(as_of - margin, config.event_time.time_zone).start.isoformat(),
            "aligned_offsets": align(config, settings),
            "source": source.describe(),
        },
    )
    if plan["label"] != label:
        raise BootstrapError(
            f"{config.table}: run {run_id} was planned for snapshot {plan['label']}, not {label}"
        )
    crash_point("after_alignment")
    return plan


def _result(record: SnapshotRecord, *, already_done: bool = False) -> BootstrapResult:
    return BootstrapResult(
        table=record.table,
        run_id=record.run_id,
        label=record.label,
        version=record.version,
        rows=record.rows,
        aligned_offsets=record.aligned_offsets,
        increments_from=record.increments_from,
        source=record.source,
        already_done=already_done,
    )


def parse_as_of(text: str) -> datetime:
    """An ISO instant (Airflow's ``run_after``); naive means UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise BootstrapError(f"--as-of {text!r}: expected an ISO 8601 instant") from None
    return as_utc(value)
