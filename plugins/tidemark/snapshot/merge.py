"""The periodic merge: snapshot(T) = snapshot(previous) + the sealed increment hours up to T,
run under the label's lock (a Delta snapshot: the table's one lock).

How changes fold into a state is ``tidemark.snapshot.changes``; which snapshot a merge starts
from and which hours it reads, ``tidemark.snapshot.merge_plan``.

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
from tidemark.errors import MergeError
from tidemark.faults import crash_point
from tidemark.hourcommit.base import PublishedHour
from tidemark.seal.hourfiles import HourFiles
from tidemark.seal.metastore import quote_identifier
from tidemark.settings import Settings
from tidemark.snapshot.changes import after_alignment, latest_changes, latest_state, state_difference
from tidemark.snapshot.formats import is_versioned, open_versioned, snapshot_lock
from tidemark.snapshot.merge_plan import MergePlan, is_stale, plan_merge, plan_versioned_merge
from tidemark.snapshot.snapshots import (
    Period,
    SnapshotLog,
    SnapshotRecord,
    SnapshotStore,
    base_for,
    period_of,
)
from tidemark.snapshot.versioned import VersionedSnapshot
from tidemark.state.locks import Lease
from tidemark.table import Table
from tidemark.time.hours import parse_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


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
        self.table = Table.open(config, settings)  # the CDC table: its sealed increment hours
        self.snapshots = SnapshotLog(settings.state_location, config.table)
        self.journal = self.table.state.journal
        self.store = SnapshotStore(spark, config, settings)
        self.hours = HourFiles(spark, self.table)
        self.lease: Lease | None = None  # the label's lock, checked before the snapshot changes

    def _fence(self) -> None:
        if self.lease is not None:
            self.lease.check()

    def merge(self, label: str) -> MergeResult:
        period = period_of(self.config, label)
        if is_versioned(self.config):
            with self.table.state.lock(snapshot_lock(self.config, label)).hold(self.run_id) as self.lease:
                versioned = open_versioned(self.spark, self.config, self.settings)
                result = self._merge_versioned(period, versioned)
                self._fence()
                versioned.after_commit(self.snapshots)  # also after a retry: its job may have died first
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
        with self.table.state.lock(snapshot_lock(self.config, period.label)).hold(self.run_id) as self.lease:
            return self._merge(plan, remerged)

    def _merge_versioned(self, period: Period, target: VersionedSnapshot) -> MergeResult:
        """A new version of the Delta snapshot (see tidemark.snapshot.target): one MERGE of the
        period's newest change per key into the current version; or, when late changes made
        the current state stale, of the difference to the state recomputed from the newest
        snapshot still current."""
        table = self.config.table
        recovered = target.recover(self.snapshots)
        records = list(self.snapshots.records())
        live = {r.label: r for r in records}
        current = live.get(period.label)
        if current is not None and current.run_id == self.run_id:
            finished_now = any(r.seq == current.seq for r in recovered)
            if not finished_now:
                log.info("%s: run %s already merged %s; nothing to do", table, self.run_id, current.ref)
            return self._result(current, [], already_done=not finished_now)
        head = target.head(records)
        if head is None:
            raise MergeError(
                f"{table}: {target.uri} has no {target.kind} snapshot yet: bootstrap first "
                f"(the tidemark_bootstrap_{table} DAG or `tidemark bootstrap`)"
            )
        planned = plan_versioned_merge(self.config, period, records, head, self.journal.state())
        if isinstance(planned, SnapshotRecord):
            return self._result(planned, [], already_done=True)
        plan, anchor = planned, planned.base
        if anchor.ref != head.ref and anchor.table_version not in {
            r.table_version for r in target.kept(self.snapshots)
        }:
            raise MergeError(
                f"{table}: late changes reach back to snapshot {anchor.ref} ({target.kind} version {anchor.table_version}), "
                f"which expired (cdc.keep_labels = {self.cdc.keep_labels}) and whose files may have been "
                f"removed: raise cdc.keep_labels, or bootstrap again (tidemark bootstrap --table {table})"
            )
        log.info(
            "%s: %s snapshot %s = %s + %s increment hour(s) %s..%s, %s",
            table,
            target.kind,
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
        # computed before the lease check, not inside the engine's commit
        source = self._versioned_source(target, changes, anchor, head).persist()
        source.count()
        try:
            crash_point("after_snapshot_staging")
            self._fence()
            committed = target.merge(
                source,
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
        finally:
            source.unpersist()
        crash_point("after_snapshot_swap")
        return self._result(self.snapshots.append(committed), [])

    def _versioned_source(
        self, target: VersionedSnapshot, changes: DataFrame, anchor: SnapshotRecord, head: SnapshotRecord
    ) -> DataFrame:
        """What the MERGE applies: the period's newest change per key (the current version is
        the anchor), or the difference between the state recomputed from the anchor and the
        current version (late changes made it stale)."""
        rules: dict[str, Any] = {
            "key": self.config.primary_key,
            "version_field": self.cdc.version_field,
            "op_field": self.cdc.op_field,
            "delete_ops": self.cdc.delete_ops,
        }
        if anchor.ref == head.ref:
            return latest_changes(changes, target.names, **rules)
        desired = latest_state(target.read(anchor), changes, **rules)
        return state_difference(desired, target.read(head), self.config.primary_key)

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
        published = [
            PublishedHour(parse_key(k, zone).path, plan.hours[k], plan.folded[k], plan.directories.get(k, ""))
            for k in hour_keys
        ]
        return self.hours.read_published(published).select(*wanted)

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
