"""The fresh read of an Iceberg table: its branch ``fresh``.

The branch holds what ``fresh.files`` says the fresh read holds: the published hours' files,
which the ``main`` branch shares, plus every committed batch's files of the hours not sealed
yet, plus (``late_policy: amend``) the late files not yet amended in. ``main`` changes only by
complete hours, as before; readers pick a side by name: ``VERSION AS OF 'fresh'`` (Spark,
Trino), ``table.refs()["fresh"]`` (pyiceberg), the branch head's snapshot id (DuckDB).

A sync brings the branch to that set in one overwrite snapshot on the branch, whose summary
names the batches it adds with their offsets, the commit log's last batch and the journal's
last step it reflects. The branch head is loaded **first**, then the journal, the commit log
and the files: the commit asserts the branch head it planned on (pyiceberg's
``AssertRefSnapshotId``), so a sync planned on stale state loses the race and plans again,
and a seal's sync (which comes before it deletes any batch file) can never be undone by an
older view. A sync that finds the branch already there commits nothing: every job may sync,
any number of times. The table itself is made by Spark's Iceberg runtime: by its first seal,
which makes it from the committed batch files when no hour is due yet (``make_table``), so the
branch starts with the first seal run after the first batch, not with the first sealed hour.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from tidemark.config.columns import partition_columns
from tidemark.fresh.files import FreshFile, FreshSync, fresh_files
from tidemark.hourcommit.iceberg_commit import AddedFile, read_footer
from tidemark.hourcommit.iceberg_files import PREFIX, needs_evolution, table_schema
from tidemark.state.layout import batch_of_file

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table as IcebergTable

    from tidemark.hourcommit.iceberg import IcebergPublication
    from tidemark.table import Table

log = logging.getLogger(__name__)

BRANCH = "fresh"
EXPIRE_AT = 50  # the branch's snapshots past their grace before a sync expires them


class IcebergFreshBranch:
    """The branch ``fresh`` of one Iceberg table (see the module)."""

    name = f"branch {BRANCH}"
    self_contained = False  # the branch names the batch files themselves: they stay its grace

    def __init__(self, table: Table, publication: IcebergPublication) -> None:
        self.table = table
        self.publication = publication

    @classmethod
    def of(cls, table: Table) -> IcebergFreshBranch:
        """The branch of an Iceberg table (``output.table_format: iceberg``: its publication
        is an ``IcebergPublication``)."""
        return cls(table, cast("IcebergPublication", table.commit.publication))

    def sync(self, reason: str, *, make_table: bool = False) -> FreshSync:
        """Bring the branch to the fresh read of the table's state now (``reason``: the job
        that asks, in the snapshot summary and the log). ``make_table``: a job that may start
        Spark (the seal) creates a table not made yet from its committed batch files, as its
        first sealed hour would, so the branch starts with the first batches, not the first
        hour (the dump never does: it starts no JVM)."""
        done = FreshSync(self.table.name)

        def step(attempt: int) -> bool:
            iceberg = self.publication.load()
            if iceberg is None and make_table:
                iceberg = self._create_table()
            if iceberg is None:
                log.info(
                    "%s: no Iceberg table yet (its first seal makes it): no fresh branch", self.table.name
                )
                return True
            head = iceberg.metadata.refs.get(BRANCH)
            if head is None:
                self._create_branch(iceberg)
                return False  # planned again on the branch just made
            return self._step(iceberg, head.snapshot_id, reason, done)

        self.publication.until_landed(f"syncing the {BRANCH} branch ({reason})", step)
        return done

    def _create_table(self) -> IcebergTable | None:
        """The table, from the first committed batch file of the fresh read: its columns and
        partition values (None: no committed batch yet)."""
        wanted = fresh_files(
            self.table, self.table.state.commit_log.state(), self.table.state.journal.state()
        )
        if not wanted:
            return None
        first = wanted[min(wanted)]
        columns = partition_columns(self.table.config)
        footer = read_footer(self.publication.store, first.relative)
        log.info(
            "%s: creating the Iceberg table from batch file %s for its fresh branch",
            self.table.name,
            first.relative,
        )
        return self.publication.create(table_schema(footer.schema, first.partition_values(columns)), columns)

    def warm_up(self) -> None:
        """pyiceberg's import and the table's load (the publication keeps its catalog)."""
        try:
            self.publication.load()
        except Exception:  # the sync raises it, named
            log.debug("%s: the fresh branch's warm-up failed", self.table.name, exc_info=True)

    def referenced(self) -> list[str]:
        """Locations a metastore's collector must keep: none (Iceberg keeps its own files)."""
        return []

    def synced_through(self) -> int:
        """The journal step the branch head reflects, by its summary (-1: none yet)."""
        return int(self.describe()["journal_seq"])

    def describe(self) -> dict[str, Any]:
        """The branch head as readers see it: the batch and journal step it reflects (-1: none
        yet), its snapshot and when it was committed (None: no branch yet)."""
        iceberg = self.publication.load()
        ref = iceberg.metadata.refs.get(BRANCH) if iceberg is not None else None
        head = iceberg.snapshot_by_id(ref.snapshot_id) if iceberg is not None and ref is not None else None
        summary = head.summary.additional_properties if head is not None and head.summary else {}
        return {
            "read": self.name,
            "through_batch": int(summary.get(f"{PREFIX}fresh-through-batch", -1)),
            "journal_seq": int(summary.get(f"{PREFIX}fresh-journal-seq", -1)),
            "exists": head is not None,
            "snapshot_id": head.snapshot_id if head is not None else None,
            "changed_at": datetime.fromtimestamp(head.timestamp_ms / 1000, UTC).isoformat()
            if head is not None
            else None,
        }

    def _create_branch(self, iceberg: IcebergTable) -> None:
        """The branch, at ``main``'s current snapshot: the complete hours. A table without a
        snapshot (made for its branch, or its first hour's commit not landed yet) first gets an
        empty one on ``main``: Iceberg starts a branch only from a snapshot (no hour complete)."""
        from pyiceberg.exceptions import CommitFailedException

        current = iceberg.current_snapshot()
        if current is None:
            summary = {
                f"{PREFIX}fresh-reason": "the first snapshot, for the fresh branch: no complete hour yet"
            }
            self.publication.commits.commit(iceberg, remove=[], add=[], evolve_to=None, summary=summary)
            return  # planned again on the snapshot just made (or the one that won the race)
        try:
            iceberg.manage_snapshots().create_branch(current.snapshot_id, BRANCH).commit()
        except CommitFailedException as exc:  # another job made it first: plan again
            log.info("%s: the %s branch was made by another job: %s", self.table.name, BRANCH, exc)
            return
        log.info(
            "%s: created the %s branch of Iceberg table %s at snapshot %s",
            self.table.name,
            BRANCH,
            self.publication.identifier,
            current.snapshot_id,
        )

    def _step(self, iceberg: IcebergTable, head: int, reason: str, done: FreshSync) -> bool:
        state = self.table.state.commit_log.state()
        journal = self.table.state.journal.state()
        wanted = fresh_files(self.table, state, journal)
        have: dict[str, DataFile] = {
            self.publication.relative_of(task.file.file_path): task.file
            for task in iceberg.scan(snapshot_id=head).plan_files()
        }
        remove = [data_file for relative, data_file in have.items() if relative not in wanted]
        new = [file for relative, file in sorted(wanted.items()) if relative not in have]
        done.through_batch, done.journal_seq = state.last_committed, journal.last_seq
        done.open_hours = sorted({f.hour.key for f in wanted.values() if not f.complete})
        if not remove and not new:
            log.info(
                "%s: the %s branch holds every committed batch through %s already (%s)",
                self.table.name,
                BRANCH,
                state.last_committed,
                reason,
            )
            return True
        added = self._added(iceberg, new)
        newest = added[-1].footer.schema if added else None
        self.publication.commits.commit(
            iceberg,
            remove=remove,
            add=added,
            evolve_to=newest if newest is not None and needs_evolution(iceberg, newest) else None,
            summary=self._summary(new, state.last_committed, journal.last_seq, reason),
            branch=BRANCH,
        )
        done.added, done.removed = len(new), len(remove)
        landed = self.publication.load()
        ref = landed.metadata.refs.get(BRANCH) if landed is not None else None
        done.snapshot_id = ref.snapshot_id if ref is not None else None
        if landed is not None:
            self._expire(landed)
        log.info(
            "%s: the %s branch now holds batches through %s and journal step %s: added %s files "
            "(%s), removed %s (%s; open hours %s)",
            self.table.name,
            BRANCH,
            state.last_committed,
            journal.last_seq,
            len(new),
            ", ".join(sorted({f.kind for f in new})) or "none",
            len(remove),
            reason,
            done.open_hours or "none",
        )
        return True

    def _expire(self, iceberg: IcebergTable) -> None:
        """The branch's snapshots committed more than ``output.fresh_grace`` ago (never a
        head), once there are ``EXPIRE_AT`` of them: a stream commits one per micro-batch, and
        every commit rewrites the table's metadata with the whole list. A query planned on one
        that long ago may find its files gone anyway (``FreshGate``). The metadata files only
        they used go with the maintenance DAG's expiry."""
        heads = {ref.snapshot_id for ref in iceberg.metadata.refs.values()}
        cutoff_ms = (datetime.now(UTC) - self.table.config.output.fresh_grace).timestamp() * 1000
        old = [
            s.snapshot_id
            for s in iceberg.snapshots()
            if s.summary is not None
            and f"{PREFIX}fresh-reason" in s.summary.additional_properties
            and s.snapshot_id not in heads
            and s.timestamp_ms < cutoff_ms
        ]
        if len(old) < EXPIRE_AT:
            return
        try:
            iceberg.maintenance.expire_snapshots().by_ids(old).commit()
        except Exception as exc:  # the next sync tries again; the branch is in step
            log.warning(
                "%s: expiring %s old snapshots of the %s branch failed: %s",
                self.table.name,
                len(old),
                BRANCH,
                exc,
            )
            return
        log.info(
            "%s: expired %s snapshots of the %s branch past its grace", self.table.name, len(old), BRANCH
        )

    def _added(self, iceberg: IcebergTable, files: list[FreshFile]) -> list[AddedFile]:
        """Each file as the commit adds it: its partition values, location and footer."""
        schema, spec = iceberg.schema(), iceberg.spec()
        columns = [schema.find_field(f.source_id).name for f in spec.fields]
        store, warehouse = self.publication.store, self.table.layout.warehouse
        return [
            AddedFile(
                file.partition_values(columns),
                self.publication.file_location(warehouse / file.relative),
                read_footer(store, file.relative),
            )
            for file in files
        ]

    def _summary(self, new: list[FreshFile], through: int, journal_seq: int, reason: str) -> dict[str, str]:
        """The batches this snapshot adds, with their offsets (from their commit records),
        and the state it reflects."""
        log_ = self.table.state.commit_log
        batches: dict[str, dict[str, list[int]]] = {}
        for batch in sorted(
            {b for f in new if (b := batch_of_file(f.relative.rsplit("/", 1)[-1])) is not None}
        ):
            commit = log_.commit(batch)
            if commit is not None:
                batches[str(batch)] = {str(r.mq_partition): [r.start, r.end] for r in commit.ranges}
        summary = {
            "fresh-through-batch": str(through),
            "fresh-journal-seq": str(journal_seq),
            "fresh-reason": reason,
            "batches": json.dumps(batches),
        }
        return {f"{PREFIX}{k}": v for k, v in summary.items()}
