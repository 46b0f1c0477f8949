"""The mirrors of a Hive table's fresh read (``<table>__fresh/``), and where each partition of
``<table>_fresh`` points (``fresh.hive_table``).

A partition of a sealed hour with nothing else points at the directory ``T``'s partition does.
Any other gets a mirror, ``<table>__fresh/<partition>/m-b<batch>-j<step>-<id>/``: links to its
files of the fresh read (``Store.link``: a hard link on a local disk, a server-side copy on an
object store, each made under a hidden name and renamed, so a reader listing the directory
sees it whole), made before the partition points there, then only added to while it holds
nothing the read no longer has. A mirror no partition points at is marked retired
(``_retired.json``, hidden), and deleted ``output.fresh_grace`` after.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tidemark.errors import TidemarkError
from tidemark.fresh.files import SEALED, FreshFile, FreshSync
from tidemark.metastore_service import same_location

if TYPE_CHECKING:
    from tidemark.table import Table

log = logging.getLogger(__name__)

MIRROR = "m-"  # a mirror directory's name starts so
RETIRED = "_retired.json"  # in a mirror no partition points at any more: since when (hidden)
Key = tuple[str, ...]  # a partition's values, in the table's partition columns' order


@dataclass
class PartitionPlan:
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


class Mirrors:
    """The mirrors of one table's fresh read (see the module)."""

    def __init__(self, table: Table, fresh: str) -> None:
        self.base, self.fresh = table.config.table, fresh
        self.layout = table.layout
        self.store = table.layout.store
        self.root = self.layout.relative(self.layout.warehouse / f"{table.name}__fresh")
        self.grace = table.config.output.fresh_grace

    def key(self, file: FreshFile, keys: list[str]) -> Key:
        values = {k.lower(): v for k, v in file.partition_values(keys).items()}
        if len(values) != len(keys):
            raise TidemarkError(
                f"{self.base}: {file.relative} ({file.kind}, hour {file.hour.key}) lacks values of the "
                f"partition columns {keys}: the fresh table cannot place it"
            )
        return tuple(values[k.lower()] for k in keys)

    def locate(self, plan: PartitionPlan, key: Key, files: list[FreshFile], done: FreshSync) -> str:
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

    def sweep(self, referenced: set[str], now: datetime) -> None:
        """Mirrors no partition points at: marked retired the first time seen so, deleted once
        ``output.fresh_grace`` has passed since."""
        mirrors: dict[str, set[str]] = {}
        for relative in self.store.all_files(self.root):
            parts = relative.split("/")
            at = next((i for i, p in enumerate(parts) if p.startswith(MIRROR)), None)
            if at is not None:
                mirrors.setdefault("/".join(parts[: at + 1]), set()).add(parts[-1])
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
            if since is not None and datetime.fromisoformat(since) + self.grace <= now:
                files, size = self.store.delete_counted(mirror)
                log.info(
                    "%s: deleted the retired mirror %s of %s (%s files, %s bytes)",
                    self.base,
                    mirror,
                    self.fresh,
                    files,
                    size,
                )
