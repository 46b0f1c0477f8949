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
admits one process at a time) there is none. It starts with ``T``: the first seal creates ``T``,
and the next sync the fresh table, a copy of its definition.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tidemark.errors import TidemarkError
from tidemark.fresh.files import SEALED, FreshFile, FreshSync, fresh_files
from tidemark.metastore_service import (
    DATABASE,
    MetastoreConnection,
    partition_at,
    same_location,
    stored_as,
    thrift_uris,
)

if TYPE_CHECKING:
    from tidemark.table import Table

log = logging.getLogger(__name__)

PREFIX = "tidemark.fresh-"  # the fresh table's properties: what it reflects
MIRROR = "m-"  # a mirror directory's name starts so
OWNER = "tidemark.fresh-of"  # the table property that says whose fresh read a table is
RETIRED = "_retired.json"  # in a mirror no partition points at any more: since when (hidden)
Key = tuple[str, ...]  # a partition's values, in the table's partition columns' order
LOCK = "fresh"  # the table's lock syncs take in turn
LOCK_WAIT_S = 60.0  # past it, a sync gives up (the fresh read lags until the next one)
# one connection per service and table for the process: a stream syncs every micro-batch
_CONNECTIONS: dict[tuple[str, str], MetastoreConnection] = {}


class FreshTableConflict(TidemarkError):
    """A table named ``<table>_fresh`` that tidemark did not make: never altered."""


@dataclass
class _Plan:
    """One sync's partitions: the table's partition columns, the partitions registered now,
    the new mirrors' directory name, and where each partition of the fresh read is to point."""

    keys: list[str]
    current: dict[Key, Any]
    tag: str
    located: dict[Key, str] = field(default_factory=dict)
    formats: dict[Key, str] = field(default_factory=dict)  # its files' format: parquet | orc

    def added(self) -> list[Key]:
        return [key for key in self.located if key not in self.current]

    def moved(self) -> list[Key]:
        return [
            key
            for key, location in self.located.items()
            if key in self.current and not same_location(self.current[key].sd.location, location)
        ]

    def dropped(self) -> list[Key]:
        return [key for key in self.current if key not in self.located]


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
        self.store = table.layout.store
        self.root = self.layout.relative(self.layout.warehouse / f"{table.name}__fresh")

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
    def sync(self, reason: str) -> FreshSync:
        """Bring the fresh table to the fresh read of the table's state now (``reason``: the
        job that asks, in the table's properties and the log). Syncs take turns (the table's
        ``fresh`` lock: a dump syncs after giving the batch lock back), so each plans on state
        at least as new as the last one applied, and a partition never moves back to an older
        view of its hour (one that lacks a batch a newer sync showed)."""
        with self.table.state.lock(LOCK).hold(f"fresh sync ({reason})", wait=LOCK_WAIT_S):
            return self._sync(reason)

    def _sync(self, reason: str) -> FreshSync:
        done = FreshSync(self.base)
        ms = self.connection()
        base = ms.table(self.base)
        if base is None:
            log.info("%s: no table in the metastore yet (its first seal makes it): no fresh table", self.base)
            return done
        shape = self._ensure(ms, base)
        keys = [k.name for k in shape.partitionKeys]
        current = {tuple(p.values): p for p in ms.partitions(self.fresh)}
        state = self.table.state.commit_log.state()
        journal = self.table.state.journal.state()
        wanted = fresh_files(self.table, state, journal)
        done.through_batch, done.journal_seq = state.last_committed, journal.last_seq
        done.open_hours = sorted({f.hour.key for f in wanted.values() if not f.complete})
        groups: dict[Key, list[FreshFile]] = {}
        for file in wanted.values():
            groups.setdefault(self._key(file, keys), []).append(file)
        plan = _Plan(
            keys, current, f"{MIRROR}b{state.last_committed}-j{journal.last_seq}-{uuid.uuid4().hex[:8]}"
        )
        for key, files in groups.items():
            plan.located[key] = self._location(plan, key, files, done)
        added, moved, dropped = plan.added(), plan.moved(), plan.dropped()
        self._apply(ms, shape, plan)
        done.removed = len(dropped)
        changed = bool(added or moved or dropped)
        self._record(ms, state.last_committed, journal.last_seq, reason, sweep=bool(moved or dropped))
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

    def _key(self, file: FreshFile, keys: list[str]) -> Key:
        values = {k.lower(): v for k, v in file.partition_values(keys).items()}
        if len(values) != len(keys):
            raise TidemarkError(
                f"{self.base}: {file.relative} ({file.kind}, hour {file.hour.key}) lacks values of the "
                f"partition columns {keys}: the fresh table cannot place it"
            )
        return tuple(values[k.lower()] for k in keys)

    def _location(self, plan: _Plan, key: Key, files: list[FreshFile], done: FreshSync) -> str:
        """Where the partition ``key`` reads ``files``: their own directory when it is a sealed
        version's and nothing else, else a mirror (the current one, added to, while it holds
        nothing else). A partition reads one format: an ORC table's late rows (Parquet, as
        every batch file) wait for the amend that writes them into the hour's ORC files."""
        formats = {f.relative.rsplit(".", 1)[-1] for f in files}
        if len(formats) > 1:
            late = [f for f in files if f.kind != SEALED]
            log.info(
                "%s: partition %s: %s late files (Parquet) join the fresh read with the amend: an ORC "
                "partition reads ORC files only",
                self.base,
                key,
                len(late),
            )
            files = [f for f in files if f.kind == SEALED]
        plan.formats[key] = files[0].relative.rsplit(".", 1)[-1]
        parents = {f.relative.rsplit("/", 1)[0] for f in files}
        if len(parents) == 1 and all(f.kind == SEALED for f in files):
            return self.layout.location(self.layout.warehouse / parents.pop())
        names = {f"{f.kind}-{f.relative.rsplit('/', 1)[-1]}": f for f in files}
        current = plan.current.get(key)
        at = self.layout.store_relative(current.sd.location) if current is not None else ""
        if (
            current is not None
            and at.startswith(f"{self.root}/")
            and at.rsplit("/", 1)[-1].startswith(MIRROR)
        ):
            have = {f.rsplit("/", 1)[-1] for f in self.store.files(at)}
            if have <= names.keys():
                for name in sorted(names.keys() - have):
                    self.store.link(names[name].relative, f"{at}/{name}")
                done.added += len(names.keys() - have)
                return str(current.sd.location)
        path = "/".join(f"{k}={v}" for k, v in zip(plan.keys, key, strict=True))
        mirror = f"{self.root}/{path}/{plan.tag}"
        for name, file in sorted(names.items()):
            self.store.link(file.relative, f"{mirror}/{name}")
        done.added += len(names)
        return self.layout.location(self.layout.warehouse / mirror)

    def _apply(self, ms: MetastoreConnection, shape: Any, plan: _Plan) -> None:
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
    def _ensure(self, ms: MetastoreConnection, base: Any) -> Any:
        """The fresh table, created as a copy of ``T``'s definition or brought to its columns."""
        from pymetastore.hive_metastore.ttypes import AlreadyExistsException

        found = self._own(ms.table(self.fresh))
        if found is not None and found.sd.cols == base.sd.cols:
            return found
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
            shape.sd.location = self.layout.location(self.layout.warehouse / self.root)
            self.store.make_dir(self.root)

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

    def _own(self, shape: Any | None) -> Any | None:
        """``shape`` (the table named ``<table>_fresh``) if tidemark made it as this table's
        fresh read; a table of that name made by anyone else is never touched."""
        if shape is not None and shape.parameters.get(OWNER) != self.base:
            raise FreshTableConflict(
                f"{self.base}: {DATABASE}.{self.fresh} exists and is not tidemark's fresh read of {self.base} "
                f"(no {OWNER}={self.base} property): it is left alone and the table has no fresh read; "
                f"rename that table, or set output.fresh: false"
            )
        return shape

    def _record(self, ms: MetastoreConnection, through: int, seq: int, reason: str, *, sweep: bool) -> None:
        """What the fresh table reflects, in its properties (``SHOW TBLPROPERTIES``); the
        mirrors no partition points at, past their grace, deleted (when a partition moved,
        else at most once a grace)."""
        shape = ms.table(self.fresh)
        assert shape is not None
        params = shape.parameters
        now = datetime.now(UTC)
        swept = params.get(f"{PREFIX}swept-at")
        grace = self.table.config.output.fresh_grace
        if sweep or swept is None or datetime.fromisoformat(swept) + grace <= now:
            self._sweep({self.layout.store_relative(p.sd.location) for p in ms.partitions(self.fresh)}, now)
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

    def _sweep(self, referenced: set[str], now: datetime) -> None:
        """Mirrors no partition points at: marked retired the first time seen so, deleted once
        ``output.fresh_grace`` has passed since."""
        mirrors: dict[str, set[str]] = {}
        for relative in self.store.all_files(self.root):
            parts = relative.split("/")
            at = next((i for i, p in enumerate(parts) if p.startswith(MIRROR)), None)
            if at is not None:
                mirrors.setdefault("/".join(parts[: at + 1]), set()).add(parts[-1])
        grace = self.table.config.output.fresh_grace
        for mirror, names in sorted(mirrors.items()):
            marker = f"{mirror}/{RETIRED}"
            if mirror in referenced:
                if RETIRED in names:
                    self.store.delete(marker)
                continue
            if RETIRED not in names:
                self.store.write_json(marker, {"at": now.isoformat()})
                continue
            since = (self.store.read_json(marker) or {}).get("at")
            if since is not None and datetime.fromisoformat(since) + grace <= now:
                files, size = self.store.delete_counted(mirror)
                log.info(
                    "%s: deleted the retired mirror %s of %s (%s files, %s bytes)",
                    self.base,
                    mirror,
                    self.fresh,
                    files,
                    size,
                )

    # -- what readers see ---------------------------------------------------------------------
    def referenced(self) -> list[str]:
        """The locations the fresh table's partitions point at (a collector keeps them)."""
        ms = self.connection()
        shape = ms.table(self.fresh)
        if shape is None or shape.parameters.get(OWNER) != self.base:  # none, or not tidemark's
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
