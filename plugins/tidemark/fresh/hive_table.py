"""The fresh read of a Hive table: the table ``<table>_fresh`` in the metastore.

It has ``T``'s columns, format and partition columns (its definition is a copy of ``T``'s, kept
in step) and one partition per partition of the fresh read (``fresh.files``), each pointing at
one directory that holds exactly that partition's files of the fresh read:

- a partition of a sealed hour and nothing else: the directory ``T``'s partition points at
  (the hour's version, shared, never copied);
- any other (an open hour's committed batches; a sealed hour with late rows not amended in
  yet): a **mirror** under ``<table>__fresh/``, of links to those files (hard links on a local
  disk, server-side copies on an object store), made before the partition points at it and
  then only added to: every file in it is a committed batch's or a published version's, once.

Every partition a sync moves moves in **one** ``alter_partitions`` call, which the metastore
applies in one transaction (an hour sealed, with all its data-derived values, moves whole). A
reader lists the partitions in one call, so it sees each partition at one location, and each
location holds each of its rows once: every committed record the fresh read holds is read
once, at every moment; no uncommitted attempt's file is ever in a mirror. A mirror a
partition left stays ``output.fresh_grace`` (a query that listed the partitions just before
still finds its files), then a sync deletes it. Since a mirror holds its own links, the seal
deletes batch files as soon as their hour is sealed, as it does without a fresh read.

The fresh table is kept over the metastore service's Thrift API (``metastore_service``) by every
job that syncs, the dump among them, which starts no JVM. Without a service (embedded Derby
admits one process at a time) there is none. The first sync makes it, from the config before
``T`` exists (so a new table's first batches are fresh within seconds), then a copy of ``T``'s
definition once the first seal has made ``T`` (with Spark's properties).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tidemark.config.columns import data_fields, partition_columns
from tidemark.errors import TidemarkError
from tidemark.fresh.files import FreshFile, FreshSync, fresh_files
from tidemark.fresh.hive_mirrors import MIRROR, Key, Mirrors, PartitionPlan
from tidemark.metastore_service import (
    DATABASE,
    HIVE_STORAGE,
    MetastoreConnection,
    partition_at,
    stored_as,
    thrift_uris,
)
from tidemark.tableformat import table_format

if TYPE_CHECKING:
    from tidemark.config import TableConfig
    from tidemark.table import Table

log = logging.getLogger(__name__)

PREFIX = "tidemark.fresh-"  # the fresh table's properties: what it reflects
OWNER = "tidemark.fresh-of"  # the table property that says whose fresh read a table is
LOCK = "fresh"  # the table's lock syncs take in turn
LOCK_WAIT_S = 60.0  # past it, a sync gives up (the fresh read lags until the next one)
# one connection per service and table for the process: a stream syncs every micro-batch
_CONNECTIONS: dict[tuple[str, str], MetastoreConnection] = {}


class FreshTableConflict(TidemarkError):
    """A table named ``<table>_fresh`` that tidemark did not make: never altered."""


class HiveFreshTable:
    """The table ``<table>_fresh`` of one Hive table (see the module)."""

    self_contained = True  # mirrors hold their own links: replaced files may go at once

    def __init__(self, table: Table, uris: str) -> None:
        self.table = table
        self.uris = uris
        self.base = table.config.table
        self.fresh = table.config.fresh_table
        self.name = f"table {self.fresh}"
        self.layout = table.layout
        self.mirrors = Mirrors(table, self.fresh)

    @classmethod
    def of(cls, table: Table) -> HiveFreshTable | None:
        """The fresh table of a Hive table whose metastore is a service reached over Thrift;
        None where it is not (embedded Derby admits one process at a time, so no job but the
        seal could keep it; `make up` starts the `derby-metastore` service)."""
        uris = thrift_uris(table.settings)
        return cls(table, uris) if uris else None

    # -- the metastore ------------------------------------------------------------------------
    def connection(self) -> MetastoreConnection:
        key = (self.uris, self.base)
        if key not in _CONNECTIONS:
            timeout = self.table.settings.metastore_timeout_s
            _CONNECTIONS[key] = MetastoreConnection(self.uris, self.base, timeout_s=timeout)
        return _CONNECTIONS[key]

    def warm_up(self) -> None:
        """The Thrift connection (the sync raises a failure, named)."""
        try:
            self.connection().connect()
        except Exception:
            log.debug("%s: the fresh table's warm-up failed", self.base, exc_info=True)

    # -- the sync -----------------------------------------------------------------------------
    def sync(self, reason: str, *, make_table: bool = False) -> FreshSync:
        """Bring the fresh table to the fresh read of the table's state now (``reason``: the
        job that asks, in the table's properties and the log). Syncs take turns (the table's
        ``fresh`` lock: a dump syncs after giving the batch lock back), so each plans on state
        at least as new as the last one applied, and a partition never moves back to an older
        view of its hour (one that lacks a batch a newer sync showed). Any job makes the fresh
        table (over Thrift: ``make_table`` is for formats whose creation needs Spark)."""
        with self.table.state.lock(LOCK).hold(f"fresh sync ({reason})", wait=LOCK_WAIT_S):
            return self._sync(reason)

    def _sync(self, reason: str) -> FreshSync:
        done = FreshSync(self.base)
        ms = self.connection()
        shape = self._ensure(ms, ms.table(self.base))
        keys = [k.name for k in shape.partitionKeys]
        current = {tuple(p.values): p for p in ms.partitions(self.fresh)}
        state = self.table.state.commit_log.state()
        journal = self.table.state.journal.state()
        wanted = fresh_files(self.table, state, journal)
        done.through_batch, done.journal_seq = state.last_committed, journal.last_seq
        done.open_hours = sorted({f.hour.key for f in wanted.values() if not f.complete})
        groups: dict[Key, list[FreshFile]] = {}
        for file in wanted.values():
            groups.setdefault(self.mirrors.key(file, keys), []).append(file)
        plan = PartitionPlan(
            keys, current, f"{MIRROR}b{state.last_committed}-j{journal.last_seq}-{uuid.uuid4().hex[:8]}"
        )
        for key, files in groups.items():
            plan.located[key] = self.mirrors.locate(plan, key, files, done)
        added, moved, dropped = plan.added(), plan.moved(), plan.dropped()
        self._apply(ms, shape, plan)
        done.removed = len(dropped)
        changed = bool(added or moved or dropped)
        located = {str(location) for location in plan.located.values()}  # every partition now
        self._record(
            ms,
            shape,
            state.last_committed,
            journal.last_seq,
            reason,
            sweep=located if moved or dropped else None,
        )
        if not (changed or done.added):
            log.info(
                "%s: the fresh table %s holds every committed batch through %s already (%s)",
                self.base,
                self.fresh,
                state.last_committed,
                reason,
            )
            return done
        log.info(
            "%s: the fresh table %s holds batches through %s and journal step %s: %s partitions added, "
            "%s moved, %s dropped, %s files linked (%s; open hours %s)",
            self.base,
            self.fresh,
            state.last_committed,
            journal.last_seq,
            len(added),
            len(moved),
            len(dropped),
            done.added,
            reason,
            done.open_hours or "none",
        )
        return done

    def _apply(self, ms: MetastoreConnection, shape: Any, plan: PartitionPlan) -> None:
        """New partitions, then every move in one ``alter_partitions`` call, then the drops."""
        from pymetastore.hive_metastore.ttypes import AddPartitionsRequest

        if added := plan.added():
            parts = [
                stored_as(partition_at(shape, list(key), plan.located[key]), plan.formats[key])
                for key in added
            ]
            request = AddPartitionsRequest(DATABASE, self.fresh, parts, ifNotExists=True, needResult=False)
            ms.call(
                f"adding {len(parts)} partitions to {self.fresh}", lambda c: c.add_partitions_req(request)
            )
        if moved := plan.moved():
            switched = []
            for key in moved:
                part = stored_as(copy.deepcopy(plan.current[key]), plan.formats[key])
                part.sd.location = plan.located[key]
                part.sd.cols = copy.deepcopy(shape.sd.cols)  # the table's columns now
                switched.append(part)
            ms.call(
                f"moving {len(switched)} partitions of {self.fresh}",
                lambda c: c.alter_partitions(DATABASE, self.fresh, switched),
            )
        for key in plan.dropped():
            self._drop(ms, list(key))

    def _drop(self, ms: MetastoreConnection, values: list[str]) -> None:
        """Unregister one partition (a retried drop finds it gone)."""
        from pymetastore.hive_metastore.ttypes import NoSuchObjectException

        def drop(client: Any) -> None:
            with contextlib.suppress(NoSuchObjectException):
                client.drop_partition(DATABASE, self.fresh, values, False)

        ms.call(f"dropping partition {values} of {self.fresh}", drop)

    # -- the table ----------------------------------------------------------------------------
    def _ensure(self, ms: MetastoreConnection, base: Any | None) -> Any:
        """The fresh table: a copy of ``T``'s definition (``base``), brought to its columns as
        they change; before ``T`` exists (its first seal makes it), one made from the config
        as Hive makes an external table, so a new table's first batches are fresh too."""
        from pymetastore.hive_metastore.ttypes import AlreadyExistsException

        found = self._own(ms.table(self.fresh))
        if found is not None and (base is None or found.sd.cols == base.sd.cols):
            return found
        if base is None:
            location = self.layout.location(self.layout.warehouse / self.mirrors.root)
            base = table_definition(self.table.config, self.base, location)
        shape = copy.deepcopy(base if found is None else found)
        shape.sd.cols = copy.deepcopy(base.sd.cols)
        shape.parameters = {
            **{
                k: v
                for k, v in (found.parameters if found is not None else {}).items()
                if k.startswith(PREFIX)
            },
            **{k: v for k, v in base.parameters.items() if k.startswith("spark.sql.") or k == "EXTERNAL"},
            OWNER: self.base,
            "comment": f"tidemark: the fresh read of {self.base} (every committed record; {self.base} "
            "holds the complete hours)",
        }
        if found is None:
            shape.tableName = self.fresh
            shape.sd.location = self.layout.location(self.layout.warehouse / self.mirrors.root)
            self.layout.store.make_dir(self.mirrors.root)

            def create(client: Any) -> None:
                with contextlib.suppress(AlreadyExistsException):  # another job's sync made it
                    client.create_table(shape)

            ms.call(f"creating {self.fresh}", create)
            log.info("%s: created the fresh table %s.%s", self.base, DATABASE, self.fresh)
        else:
            ms.call(f"evolving {self.fresh}", lambda c: c.alter_table(DATABASE, self.fresh, shape))
            log.info("%s: the fresh table %s took the columns of %s", self.base, self.fresh, self.base)
        made = self._own(ms.table(self.fresh))
        assert made is not None
        return made

    def _ours(self, shape: Any) -> bool:
        """Whether tidemark made ``shape`` as this table's fresh read."""
        return bool(shape.parameters.get(OWNER) == self.base)

    def _own(self, shape: Any | None) -> Any | None:
        """``shape`` (the table named ``<table>_fresh``) if tidemark made it as this table's
        fresh read; a table of that name made by anyone else is never touched."""
        if shape is not None and not self._ours(shape):
            raise FreshTableConflict(
                f"{self.base}: {DATABASE}.{self.fresh} exists and is not tidemark's fresh read of {self.base} "
                f"(no {OWNER}={self.base} property): it is left alone and the table has no fresh read; "
                f"rename that table, or set output.fresh: false"
            )
        return shape

    def _record(
        self,
        ms: MetastoreConnection,
        shape: Any,
        through: int,
        seq: int,
        reason: str,
        *,
        sweep: set[str] | None,
    ) -> None:
        """What the fresh table (``shape``, as this sync found it) reflects, in its properties
        (``SHOW TBLPROPERTIES``); the mirrors no partition points at, past their grace,
        deleted: when partitions moved (``sweep``: where every partition points now), else at
        most once a grace."""
        params = shape.parameters
        now = datetime.now(UTC)
        swept = params.get(f"{PREFIX}swept-at")
        grace = self.table.config.output.fresh_grace
        if sweep is not None or swept is None or datetime.fromisoformat(swept) + grace <= now:
            if sweep is None:
                sweep = {str(p.sd.location) for p in ms.partitions(self.fresh)}
            self.mirrors.sweep({self.layout.store_relative(location) for location in sweep}, now)
            params[f"{PREFIX}swept-at"] = now.isoformat()
        elif params.get(f"{PREFIX}through-batch") == str(through) and params.get(
            f"{PREFIX}journal-seq"
        ) == str(seq):
            return
        params.update(
            {
                f"{PREFIX}through-batch": str(through),
                f"{PREFIX}journal-seq": str(seq),
                f"{PREFIX}reason": reason,
                f"{PREFIX}changed-at": now.isoformat(),
            }
        )
        ms.call(f"recording the state of {self.fresh}", lambda c: c.alter_table(DATABASE, self.fresh, shape))

    # -- what readers see ---------------------------------------------------------------------
    def referenced(self) -> list[str]:
        """The locations the fresh table's partitions point at (a collector keeps them)."""
        ms = self.connection()
        shape = ms.table(self.fresh)
        if shape is None or not self._ours(shape):  # none, or not tidemark's
            return []
        return [str(p.sd.location) for p in ms.partitions(self.fresh)]

    def synced_through(self) -> int:
        return int(self.describe()["journal_seq"])

    def describe(self) -> dict[str, Any]:
        """What the fresh table reflects, by its properties (-1: nothing yet)."""
        shape = self._own(self.connection().table(self.fresh))
        params = shape.parameters if shape is not None else {}
        return {
            "read": self.name,
            "exists": shape is not None,
            "through_batch": int(params.get(f"{PREFIX}through-batch", -1)),
            "journal_seq": int(params.get(f"{PREFIX}journal-seq", -1)),
            "changed_at": params.get(f"{PREFIX}changed-at"),
        }


def table_definition(config: TableConfig, name: str, location: str) -> Any:
    """The table ``name`` with ``config``'s columns, partition columns and format, as Hive
    itself makes an external table (string partition columns, no Spark properties)."""
    from pymetastore.hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor
    from pymetastore.hive_metastore.ttypes import Table as HiveTable

    inputs, outputs, serde = HIVE_STORAGE[table_format(config).name]
    storage = StorageDescriptor(
        cols=[FieldSchema(column, kind, None) for column, kind in data_fields(config)],
        location=location,
        inputFormat=inputs,
        outputFormat=outputs,
        compressed=False,
        numBuckets=-1,
        serdeInfo=SerDeInfo(None, serde, {"serialization.format": "1"}),
        bucketCols=[],
        sortCols=[],
        parameters={},
    )
    return HiveTable(
        tableName=name,
        dbName=DATABASE,
        owner="tidemark",
        sd=storage,
        partitionKeys=[FieldSchema(k, "string", None) for k in partition_columns(config)],
        parameters={"EXTERNAL": "TRUE"},
        tableType="EXTERNAL_TABLE",
    )
