"""``HourPublication``: how a staged version of an hour becomes the one readers see, Paimon's
``SnapshotCommit``: one implementation per table format, chosen once (``hourcommit``'s
factory), with the format's facets, so that no caller asks which format a table has.

- ``HivePublication``: the hour's metastore partitions (added where the hour's directory
  stays, or switched to the version's own directory in one metastore operation); a table's
  late side table is always one;
- ``iceberg.IcebergPublication``: one Iceberg snapshot replacing the hour's files.

Where the version's files are staged is the storage seam's (``base.HourVersions``).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tidemark.errors import TidemarkError
from tidemark.faults import crash_point
from tidemark.hourcommit.base import HourNote, HourVersions
from tidemark.settings import Settings
from tidemark.state.layout import partition_hour_values

if TYPE_CHECKING:
    from tidemark.time.hours import Hour

log = logging.getLogger(__name__)

Specs = list[tuple[dict[str, str], Path]]  # (partition spec, where its files lie) per partition


@dataclass
class MaintenanceResult:
    """What a table format's maintenance did (an Iceberg table's snapshot expiry)."""

    table: str
    cutoff: str = ""
    expired: list[int] = field(default_factory=list)
    kept: int = 0
    deleted: list[str] = field(default_factory=list)  # metadata files, warehouse-relative
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class HourPublication(ABC):
    """Publishes the versions of one table's hours (``table``, located at ``location``)."""

    records_notes: ClassVar[bool] = False  # ``publish`` keeps an ``HourNote`` (a snapshot summary)
    in_metastore: ClassVar[bool] = True  # readers find it through the metastore (else by location)
    expires_snapshots: ClassVar[bool] = False  # the maintenance DAG expires its snapshots
    own_version_dirs: ClassVar[bool] = False  # every version in a directory of its own, on any store
    # Parquet timestamps as INT96, the type Hive's readers (and Spark's Hive tables) expect
    int96_timestamps: ClassVar[bool] = True

    def __init__(self, table: str, location: Path, versions: HourVersions, settings: Settings) -> None:
        self.table = table
        self.location = location
        self.versions = versions
        self.layout = versions.layout
        self.store = versions.store
        self.settings = settings

    @classmethod
    def spark_conf(cls, settings: Settings) -> dict[str, str]:
        """What a job that publishes hours needs in its Spark session beyond the defaults."""
        return {}

    @abstractmethod
    def publish(self, metastore: Any, hour: Hour, specs: Specs, note: HourNote | None = None) -> None:
        """Make ``specs`` (the version's partitions) the hour readers see (``note``: what the
        version holds, for a format that records it)."""

    def refresh(self, metastore: Any) -> None:
        """Drop the job's cached listing of the table, whose published files changed."""
        metastore.refresh(self.table)

    def warm_ups(self, metastore: Any) -> list[Callable[[], object]]:
        """What a seal can start while Spark compacts: what its first publish needs (the
        Hive client's start: Derby's boot or the metastore connection)."""
        return [metastore.connect]

    def withdraw_before(self, metastore: Any, first_kept: Hour) -> list[str]:
        """Take every hour before ``first_kept`` away from readers (retention; the files stay
        for retention to delete after its grace). Returns what went, by name; a retry finishes what
        a killed try began."""
        names = [
            n
            for n in metastore.partition_names(self.table)
            if partition_hour_values(n) < (first_kept.dt, first_kept.hr)
        ]
        if names:
            metastore.drop_partitions(self.table, names[:1])
            crash_point("mid_retention_unregister")
            metastore.drop_partitions(self.table, names[1:])
            metastore.refresh(self.table)
        return names

    def referenced(self, metastore: Any) -> list[str]:
        """The locations readers are pointed at now, which the collector keeps."""
        return list(metastore.partition_locations(self.table))

    def still_reads(self, directories: list[Path]) -> bool:
        """Whether something the format keeps (time travel) still reads ``directories``."""
        return False

    def snapshot_files(self) -> list[str]:
        """The data files (warehouse-relative) of the table's current snapshot, for a format
        that keeps them itself (a metastore-registered table's are its partitions')."""
        return []

    def maintain(self, cutoff: datetime, *, dry_run: bool = False) -> MaintenanceResult:
        """The format's own upkeep (``tidemark maintain``) of what is older than ``cutoff``."""
        raise TidemarkError(f"{self.table}: a Hive table has no snapshots: nothing to maintain")


class HivePublication(HourPublication):
    """An hour's Hive partitions: added where the hour's directory stays, or switched to the
    version's own directory (add, then ``SET LOCATION``, in one metastore operation)."""

    def publish(self, metastore: Any, hour: Hour, specs: Specs, note: HourNote | None = None) -> None:
        metastore.ensure_table(self.table, self._table_location(self.location))
        located = [(spec, self.layout.location(leaf)) for spec, leaf in specs]
        if self.versions.own_directories:
            metastore.switch_partitions(self.table, hour.spec, located)
        else:
            metastore.add_partitions(self.table, located)

    def _table_location(self, path: Path) -> Path | str:
        """The table's location as the metastore registers it (a local one stays a path: the
        directory is made before the table is created)."""
        location = self.layout.location(path)
        return path if location == str(path) else location
