"""The periodic merge: snapshot(T) = snapshot(previous) + the sealed increment hours up to T.

Per primary key the row with the highest (version, MQ offset, MQ partition) wins; if that row
is a delete (``cdc.delete_ops``) the key is gone. Snapshot rows rank below every change of
the same version, so a change re-delivered after a bootstrap read it is still harmless.

The merge is driven by sealing, not by a clock: every increment hour in (previous, T] must be
sealed (its end is before the sealed frontier), or the merge refuses and names the hours. An
hour with no rows is final once the frontier passed it, and empty.

Late changes are never lost. The CDC tables use the ``amend`` policy: a change for an hour
already sealed is folded into that hour as a new version. A merged snapshot records the
version of every hour it read, so it knows when it is *stale*; merging any later snapshot
first re-merges the stale ones in order (``remerged`` in the result), and the ingest DAG
re-triggers the merge of the newest snapshot when an amend makes one stale.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.config import TableConfig
from tidemark.errors import MergeError, UnsealedHoursError
from tidemark.faults import crash_point
from tidemark.seal.hourfiles import HourFiles
from tidemark.seal.metastore import quote_identifier
from tidemark.seal.versions import version_dirs
from tidemark.settings import Settings
from tidemark.snapshot.delta import DELETE_FLAG, DeltaSnapshot, is_delta, snapshot_lock
from tidemark.snapshot.snapshots import (
    Period,
    SnapshotLog,
    SnapshotRecord,
    SnapshotStore,
    base_for,
    period_of,
)
from tidemark.state.journal import HourJournal, JournalState
from tidemark.state.locks import Lease, TableLock
from tidemark.time.hours import hour_of, hours_from, parse_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


# -- the pure transforms -----------------------------------------------------------------------
def _ranked(frame: DataFrame, columns: list[str], op: Any, offset: Any, partition: Any) -> DataFrame:
    from pyspark.sql import functions as F

    return frame.select(
        *(F.col(quote_identifier(c)) for c in columns),
        op.cast("string").alias("_tm_op"),
        offset.cast("bigint").alias("_tm_offset"),
        partition.cast("int").alias("_tm_partition"),
    )


def _ranked_changes(changes: DataFrame, columns: list[str], op_field: str) -> DataFrame:
    from pyspark.sql import functions as F

    return _ranked(
        changes, columns, F.col(quote_identifier(op_field)), F.col("_mq_offset"), F.col("_mq_partition")
    )


def _latest_per_key(rows: DataFrame, columns: list[str], key: list[str], version_field: str) -> DataFrame:
    """Per key the row with the highest (version, MQ offset, MQ partition): columns + _tm_op."""
    from pyspark.sql import functions as F

    q = quote_identifier
    payload = F.struct(*(F.col(q(c)) for c in columns), F.col("_tm_op"))
    order = F.struct(F.col(q(version_field)), F.col("_tm_offset"), F.col("_tm_partition"))
    latest = rows.groupBy(*(F.col(q(k)) for k in key)).agg(F.max_by(payload, order).alias("_tm_row"))
    return latest.select(*(F.col(f"_tm_row.{q(c)}").alias(c) for c in [*columns, "_tm_op"]))


def latest_state(
    base: DataFrame,
    changes: DataFrame,
    *,
    key: list[str],
    version_field: str,
    op_field: str,
    delete_ops: list[str],
) -> DataFrame:
    """Fold ``changes`` (snapshot columns + op + ``_mq_partition``/``_mq_offset``) into
    ``base`` (snapshot columns): the latest row per key, deleted keys dropped."""
    from pyspark.sql import functions as F

    columns = base.columns
    none = F.lit(None)
    rows = _ranked(base, columns, none, F.lit(-1), F.lit(-1)).unionByName(
        _ranked_changes(changes, columns, op_field)
    )
    latest = _latest_per_key(rows, columns, key, version_field)
    alive = latest.filter(F.col("_tm_op").isNull() | ~F.col("_tm_op").isin(delete_ops))
    return alive.select(*(F.col(quote_identifier(c)) for c in columns))


def latest_changes(
    changes: DataFrame,
    columns: list[str],
    *,
    key: list[str],
    version_field: str,
    op_field: str,
    delete_ops: list[str],
) -> DataFrame:
    """Per key its newest change (as ``latest_state`` ranks them), flagged ``_tm_delete``:
    the source of a record-level MERGE, which compares it with the stored row's version."""
    from pyspark.sql import functions as F

    latest = _latest_per_key(_ranked_changes(changes, columns, op_field), columns, key, version_field)
    return latest.select(
        *(F.col(quote_identifier(c)) for c in columns),
        F.coalesce(F.col("_tm_op").isin(delete_ops), F.lit(False)).alias(DELETE_FLAG),
    )


def state_difference(desired: DataFrame, current: DataFrame, key: list[str]) -> DataFrame:
    """What turns ``current`` into ``desired`` (both one row per key): changed or new rows,
    and the keys to delete, flagged ``_tm_delete``."""
    from pyspark.sql import functions as F

    changed = desired.subtract(current).withColumn(DELETE_FLAG, F.lit(False))
    gone = current.join(desired.select(*key), key, "left_anti").withColumn(DELETE_FLAG, F.lit(True))
    return changed.unionByName(gone)


def after_alignment(changes: DataFrame, offsets: dict[str, int]) -> DataFrame:
    """Drop increment rows below a bootstrap's aligned offsets (already in the source it read)."""
    from pyspark.sql import functions as F

    if not offsets:
        return changes
    floor = F.lit(0).cast("bigint")
    for partition, offset in offsets.items():
        floor = F.when(F.col("_mq_partition") == int(partition), F.lit(int(offset))).otherwise(floor)
    return changes.filter(F.col("_mq_offset") >= floor)


# -- planning (no Spark) -----------------------------------------------------------------------
def published_versions(partitions: JournalState) -> dict[str, int]:
    """hour -> the version readers see (quarantined hours are not published)."""
    return {h: e.version for h, e in partitions.hours.items() if e.published}


@dataclass(frozen=True)
class MergePlan:
    period: Period
    base: SnapshotRecord
    hours: dict[str, int]  # hour key -> version to read; 0 = final and empty
    folded: dict[str, int] = field(default_factory=dict)  # hour key -> last batch it holds
    # object stores: hour key -> the version directory its journal entry's files lie in
    directories: dict[str, str] = field(default_factory=dict)

    def hour_keys_with_rows(self) -> list[str]:
        return [h for h, v in self.hours.items() if v > 0]

    def describe(self) -> str:
        """What the merge reads: its base and every hour's version (names a snapshot version)."""
        hours = ",".join(f"{h}@v{v}/b{self.folded.get(h, -1)}" for h, v in sorted(self.hours.items()))
        return f"{self.period.label} = {self.base.ref} + {hours}"


def plan_merge(
    config: TableConfig, period: Period, live: dict[str, SnapshotRecord], partitions: JournalState
) -> MergePlan:
    """Which snapshot to start from and which hours to read; refuses unsealed hours."""
    base = base_for(live, period)
    if base is None:
        raise MergeError(
            f"{config.table}: no snapshot holds a state before {period.label} ends ({period.end.isoformat()}): "
            f"bootstrap first (the tidemark_bootstrap_{config.table} DAG or `tidemark bootstrap`)"
        )
    first = hour_of(datetime.fromisoformat(base.increments_from), config.event_time.time_zone)
    hours = list(hours_from(first, ending_by=period.end))
    versions = published_versions(partitions)
    frontier = datetime.fromisoformat(partitions.sealed_through) if partitions.sealed_through else None
    waiting: dict[str, str] = {}
    for hour in hours:
        entry = partitions.hours.get(hour.key)
        if entry is not None and entry.quarantined:
            waiting[hour.key] = f"quarantined by the quality gate (tidemark release --table {config.table})"
        elif entry is None and (frontier is None or hour.end > frontier):
            waiting[hour.key] = "not sealed yet: the global watermark has not passed its end"
    if waiting:
        raise UnsealedHoursError(config.table, period.label, waiting)
    folded = {h.key: partitions.hours[h.key].folded_through_batch for h in hours if versions.get(h.key, 0)}
    directories = {
        h.key: found.pop()
        for h in hours
        if versions.get(h.key, 0) and len(found := version_dirs(list(partitions.hours[h.key].files))) == 1
    }
    return MergePlan(period, base, {h.key: versions.get(h.key, 0) for h in hours}, folded, directories)


def is_stale(record: SnapshotRecord, live: dict[str, SnapshotRecord], partitions: JournalState) -> bool:
    """A merged snapshot whose hours were amended (or whose base changed) since it was built."""
    if record.kind != "merge":
        return False
    versions = published_versions(partitions)
    if any(versions.get(hour, 0) != version for hour, version in record.hours.items()):
        return True
    base_label = record.base.rsplit("@", 1)[0]
    base = live.get(base_label)
    return base is None or base.ref != record.base or is_stale(base, live, partitions)


def plan_delta_merge(
    config: TableConfig,
    period: Period,
    records: list[SnapshotRecord],
    head: SnapshotRecord,
    partitions: JournalState,
) -> MergePlan | SnapshotRecord:
    """A Delta snapshot's merge of ``period`` on top of its current version ``head``: the
    plan (its base is the anchor: ``head`` itself, or when late changes made ``head`` stale,
    the newest snapshot still current), or the record already holding the period (nothing to
    do). Refuses a period behind ``head``: Delta snapshots only move forward."""
    live = {r.label: r for r in records}
    current = live.get(period.label)
    if period.label != head.label and period.end <= head.through_at:
        if current is not None and not is_stale(current, live, partitions):
            return current
        if base_for(live, period) is None:
            plan_merge(config, period, live, partitions)  # raises: bootstrap first
        kept = (
            f"; Delta version {current.delta_version} keeps {current.ref} as it was merged"
            if current is not None
            else ""
        )
        raise MergeError(
            f"{config.table}: snapshot {period.label} is behind the Delta snapshot's current version "
            f"{head.delta_version} ({head.ref}, the state through {head.through}): Delta snapshots "
            f"only move forward. Late changes to its hours are folded into the next merge of "
            f"{head.label} (tidemark merge --table {config.table} --snapshot {head.label}){kept}"
        )
    if period.label == head.label and not is_stale(head, live, partitions):
        return head
    refs = {r.ref: r for r in records}
    anchor = head if period.label != head.label else refs[head.base]
    while is_stale(anchor, live, partitions):  # a bootstrap is never stale
        anchor = refs[anchor.base]
    return plan_merge(config, period, {anchor.label: anchor}, partitions)


def delta_head(records: list[SnapshotRecord]) -> SnapshotRecord | None:
    """The record of the newest Delta version the log knows."""
    versions = [r for r in records if r.delta_version >= 0]
    return max(versions, key=lambda r: r.delta_version) if versions else None


def stale_snapshot(config: TableConfig, settings: Settings) -> str | None:
    """The newest merged snapshot if it (or one it builds on) is stale: merging it again
    re-merges the whole stale chain. None when every snapshot is current."""
    log = SnapshotLog(settings.state_location, config.table)
    live = log.live()
    if is_delta(config):  # only the current Delta version can be merged again (forward only)
        head = delta_head(list(log.records()))
        merged = [head] if head is not None and head.kind == "merge" else []
    else:
        merged = [r for r in live.values() if r.kind == "merge"]
    if not merged:
        return None
    newest = max(merged, key=lambda r: r.through_at)
    partitions = HourJournal(settings.state_location, config.table).state()
    return newest.label if is_stale(newest, live, partitions) else None


def preview_merge(config: TableConfig, settings: Settings, label: str) -> dict[str, Any]:
    """What a merge of ``label`` would read (dry run): base, hours, or why it would refuse."""
    period = period_of(config, label)
    log = SnapshotLog(settings.state_location, config.table)
    live = log.live()
    partitions = HourJournal(settings.state_location, config.table).state()
    preview: dict[str, Any] = {"table": config.table, "snapshot": period.label, "dry_run": True}
    try:
        if is_delta(config):
            records = list(log.records())
            head = delta_head(records)
            if head is None:
                raise MergeError(f"{config.table}: no Delta snapshot yet: bootstrap first")
            planned = plan_delta_merge(config, period, records, head, partitions)
            if isinstance(planned, SnapshotRecord):
                return {**preview, "already_merged": planned.ref, "delta_version": planned.delta_version}
            how = "merge into" if planned.base.ref == head.ref else "recompute, merge the difference into"
            return {**preview, "base": planned.base.ref, "delta": f"{how} {head.ref}", "hours": planned.hours}
        plan = plan_merge(config, period, live, partitions)
    except MergeError as exc:
        return {**preview, "would_refuse": str(exc)}
    stale = plan.base.kind == "merge" and is_stale(plan.base, live, partitions)
    return {**preview, "base": plan.base.ref, "base_stale": stale, "hours": plan.hours}


# -- running -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MergeResult:
    table: str
    run_id: str
    snapshot: str
    version: int
    rows: int
    base: str
    hours: int
    increment_rows: int
    remerged: list[str] = field(default_factory=list)
    already_done: bool = False
    atomic_swap: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Merger:
    def __init__(self, spark: SparkSession, config: TableConfig, settings: Settings, run_id: str) -> None:
        if config.cdc is None:
            raise MergeError(f"{config.table}: not a cdc table (no cdc: section), nothing to merge")
        self.spark = spark
        self.config = config
        self.cdc = config.cdc
        self.settings = settings
        self.run_id = run_id
        self.snapshots = SnapshotLog(settings.state_location, config.table)
        self.journal = HourJournal(settings.state_location, config.table)
        self.store = SnapshotStore(spark, config, settings)
        self.hours = HourFiles(spark, config, settings)
        self.lease: Lease | None = None  # the label's lock, checked before the snapshot changes

    def _fence(self) -> None:
        if self.lease is not None:
            self.lease.check()

    def merge(self, label: str) -> MergeResult:
        period = period_of(self.config, label)
        if is_delta(self.config):
            with TableLock(
                self.settings.state_location, self.config.table, snapshot_lock(self.config, label)
            ).hold(self.run_id) as self.lease:
                delta = DeltaSnapshot(self.spark, self.config, self.settings)
                result = self._merge_delta(period, delta)
                self._fence()
                delta.publish_views(self.snapshots)  # also after a retry: its job may have died first
                return result
        live = self.snapshots.live()
        current = live.get(period.label)
        if current is not None and current.run_id == self.run_id:
            log.info(
                "%s: run %s already merged %s; nothing to do", self.config.table, self.run_id, current.ref
            )
            return self._result(current, [], already_done=True)
        partitions = self.journal.state()
        remerged: list[str] = []
        base = base_for(live, period)
        if base is not None and is_stale(base, live, partitions):
            log.info(
                "%s: %s was built before some of its hours were amended: merging it again first",
                self.config.table,
                base.ref,
            )
            earlier = self.merge(base.label)
            remerged = [*earlier.remerged, earlier.snapshot]
            live = self.snapshots.live()
        plan = plan_merge(self.config, period, live, partitions)
        with TableLock(
            self.settings.state_location, self.config.table, snapshot_lock(self.config, period.label)
        ).hold(self.run_id) as self.lease:
            return self._merge(plan, remerged)

    def _merge_delta(self, period: Period, delta: DeltaSnapshot) -> MergeResult:
        """A new version of the Delta snapshot (see tidemark.snapshot.delta): one MERGE of the
        period's newest change per key into the current version; or, when late changes made
        the current state stale, of the difference to the state recomputed from the newest
        snapshot still current."""
        table = self.config.table
        recovered = delta.recover(self.snapshots)
        records = list(self.snapshots.records())
        live = {r.label: r for r in records}
        current = live.get(period.label)
        if current is not None and current.run_id == self.run_id:
            finished_now = any(r.seq == current.seq for r in recovered)
            if not finished_now:
                log.info("%s: run %s already merged %s; nothing to do", table, self.run_id, current.ref)
            return self._result(current, [], already_done=not finished_now)
        head = delta.head(records)
        if head is None:
            raise MergeError(
                f"{table}: {delta.uri} has no Delta snapshot yet: bootstrap first "
                f"(the tidemark_bootstrap_{table} DAG or `tidemark bootstrap`)"
            )
        planned = plan_delta_merge(self.config, period, records, head, self.journal.state())
        if isinstance(planned, SnapshotRecord):
            return self._result(planned, [], already_done=True)
        plan, anchor = planned, planned.base
        log.info(
            "%s: Delta snapshot %s = %s + %s increment hour(s) %s..%s, %s",
            table,
            period.label,
            anchor.ref,
            len(plan.hours),
            min(plan.hours, default="-"),
            max(plan.hours, default="-"),
            "merged into the current version"
            if anchor.ref == head.ref
            else f"recomputed (late changes) and its difference merged into {head.ref}",
        )
        changes = after_alignment(self._increments(plan), anchor.aligned_offsets)
        increment_rows = changes.count()
        rules: dict[str, Any] = {
            "key": self.config.primary_key,
            "version_field": self.cdc.version_field,
            "op_field": self.cdc.op_field,
            "delete_ops": self.cdc.delete_ops,
        }
        if anchor.ref == head.ref:
            source = latest_changes(changes, delta.names, **rules)
        else:
            desired = latest_state(delta.read(anchor), changes, **rules)
            source = state_difference(desired, delta.read(head), self.config.primary_key)
        rows = source.toArrow()
        crash_point("after_snapshot_staging")
        self._fence()
        committed = delta.merge(
            rows,
            SnapshotRecord(
                seq=-1,
                table=table,
                label=period.label,
                kind="merge",
                version=0,
                run_id=self.run_id,
                through=period.end.isoformat(),
                increments_from=period.end.isoformat(),
                rows=-1,  # counted from the MERGE's metrics
                files=(),
                created_at=datetime.now().astimezone().isoformat(),
                base=anchor.ref,
                hours=plan.hours,
                changes={"increment_rows": increment_rows, "rows_before": head.rows},
            ),
            only_newer=anchor.ref == head.ref,
        )
        crash_point("after_snapshot_swap")
        return self._result(self.snapshots.append(committed), [])

    def _merge(self, plan: MergePlan, remerged: list[str]) -> MergeResult:
        table = self.config.table
        with_rows = plan.hour_keys_with_rows()
        log.info(
            "%s: snapshot %s = %s + %s increment hour(s) %s..%s (%s with rows)",
            table,
            plan.period.label,
            plan.base.ref,
            len(plan.hours),
            min(plan.hours, default="-"),
            max(plan.hours, default="-"),
            len(with_rows),
        )
        changes = after_alignment(self._increments(plan), plan.base.aligned_offsets)
        increment_rows = changes.count()
        merged = latest_state(
            self.store.read(plan.base),
            changes,
            key=self.config.primary_key,
            version_field=self.cdc.version_field,
            op_field=self.cdc.op_field,
            delete_ops=self.cdc.delete_ops,
        )
        staged = self.store.stage(merged, plan.period.label, self.run_id, plan.describe(), self.lease)
        crash_point("after_snapshot_staging")
        self._fence()
        atomic = self.store.publish(staged)
        record = self.snapshots.append(
            SnapshotRecord(
                seq=-1,
                table=table,
                label=plan.period.label,
                kind="merge",
                version=0,  # the log assigns the label's next version
                run_id=self.run_id,
                through=plan.period.end.isoformat(),
                increments_from=plan.period.end.isoformat(),
                rows=staged.rows,
                files=staged.files,
                created_at=datetime.now().astimezone().isoformat(),
                base=plan.base.ref,
                hours=plan.hours,
                changes={"increment_rows": increment_rows},
                location=staged.location,
            )
        )
        self.store.discard(staged, record)
        return self._result(record, remerged, atomic=atomic)

    def _increments(self, plan: MergePlan) -> DataFrame:
        """The change rows of the sealed hours (their current version, late rows folded in)."""
        from pyspark.sql import functions as F

        columns = [*(c for c, _ in self.store.columns()), self.cdc.op_field]
        wanted = [*(F.col(quote_identifier(c)) for c in columns), F.col("_mq_partition"), F.col("_mq_offset")]
        hour_keys = plan.hour_keys_with_rows()
        if not hour_keys:
            schema = ", ".join(
                [
                    *(f"{quote_identifier(c.name)} {c.type.ddl()}" for c in self.config.schema_columns),
                    "_mq_partition int",
                    "_mq_offset bigint",
                ]
            )
            return self.spark.createDataFrame([], schema).select(*wanted)
        zone = self.config.event_time.time_zone
        if self.hours.layout.object_store:  # each hour's registered version directory
            layout = self.hours.layout
            files = [
                layout.warehouse / f
                for k in hour_keys
                for f in layout.store.files(
                    plan.directories.get(k)
                    or layout.relative(
                        layout.hour_version(parse_key(k, zone).path, plan.hours[k], plan.folded[k])
                    )
                )
            ]
            return self.hours.read_hour(layout.table_dir, files).select(*wanted)
        table_dir = self.hours.layout.table_dir
        dirs = [str(table_dir / parse_key(k, zone).path) for k in hour_keys]
        self.spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        frame = self.hours.format.spark_read(self.spark.read.option("basePath", str(table_dir)), *dirs)
        return frame.select(*wanted)

    def _result(
        self,
        record: SnapshotRecord,
        remerged: list[str],
        *,
        already_done: bool = False,
        atomic: bool = True,
    ) -> MergeResult:
        return MergeResult(
            table=self.config.table,
            run_id=self.run_id,
            snapshot=record.label,
            version=record.version,
            rows=record.rows,
            base=record.base,
            hours=len(record.hours),
            increment_rows=int(record.changes.get("increment_rows", 0)),
            remerged=remerged,
            already_done=already_done,
            atomic_swap=atomic,
        )


def run_merge(
    spark: SparkSession, config: TableConfig, settings: Settings, run_id: str, label: str
) -> MergeResult:
    return Merger(spark, config, settings, run_id).merge(label)
