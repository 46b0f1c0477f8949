"""The snapshot table of a CDC table: its periods, its records and how a new version goes live.

``<table>_snapshot`` is an external Parquet table with one partition per snapshot
(``snapshot_dt=<label>``). Two kinds of snapshot exist:

- a **bootstrap** (label chosen by its run, e.g. ``2026-11-22T1005``): the full source read
  once, with the MQ end offsets recorded *before* the read;
- a **merge** (label = a period: ``2026-11-22`` daily or ``2026-11-22T13`` hourly): the state
  at the period's end, i.e. the previous snapshot plus the sealed increment hours up to it.

The snapshot log (``<state>/<table>/snapshots/log/<seq>.json``, create-only, sequential like
the partition journal) says which version of which label is live, what it was built from and
through which instant it holds the state. Readers of the table see a partition's old files or
its new ones (directory exchange), and merges only ever start from a recorded snapshot, so a
half-built one is never used.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from tidemark.config import TableConfig
from tidemark.errors import BatchConflictError, MergeError
from tidemark.hourcommit import snapshot_commit
from tidemark.hourcommit.snapshot_commit import Retention, StagedSnapshot
from tidemark.seal.metastore import (
    HiveClientMetastore,
    evolve_table,
    external_parquet_sql,
    quote_identifier,
)
from tidemark.settings import Settings
from tidemark.state.layout import Layout, run_key
from tidemark.state.seqlog import SequentialLog
from tidemark.state.storage import Location, create_only, read_json
from tidemark.table import Table
from tidemark.time.hours import HourKeyError, parse_key
from tidemark.time.instants import parse_instant

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tidemark.state.locks import Lease

log = logging.getLogger(__name__)

PARTITION_COLUMN = "snapshot_dt"
# the formats that keep every snapshot as a version of one table (merged forward, labels as
# versions); ``parquet`` keeps a partition per label
VERSIONED_FORMATS = {"delta": "Delta", "iceberg": "Iceberg"}
LABEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DAY_LABEL = re.compile(r"^\d{4}-\d{2}-\d{2}$")


# -- periods ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Period:
    """The interval a merged snapshot closes: state as of ``end`` (UTC instants)."""

    label: str
    start: datetime
    end: datetime


def period_of(config: TableConfig, label: str) -> Period:
    """``2026-11-22`` (a local day of the table's zone) or ``2026-11-22T13`` (an hour)."""
    zone = config.event_time.time_zone
    text = label.strip()
    if DAY_LABEL.match(text):
        try:
            day = datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone))
        except ValueError as exc:
            raise MergeError(f"{config.table}: snapshot {label!r}: {exc}") from None
        following = (day + timedelta(days=1)).replace(hour=0)
        return Period(text, day.astimezone(UTC), following.astimezone(UTC))
    try:
        hour = parse_key(text, zone)
    except HourKeyError as exc:
        raise MergeError(
            f"{config.table}: snapshot {label!r}: expected a day (YYYY-MM-DD) or an hour (YYYY-MM-DDTHH); {exc}"
        ) from None
    return Period(text, hour.start, hour.end)


def is_versioned(config: TableConfig) -> bool:
    """Whether the table's snapshots are versions of one Delta or Iceberg table."""
    return config.cdc is not None and config.cdc.snapshot_format in VERSIONED_FORMATS


def format_name(config: TableConfig) -> str:
    """``Delta`` or ``Iceberg``, for messages."""
    assert config.cdc is not None
    return VERSIONED_FORMATS.get(config.cdc.snapshot_format, config.cdc.snapshot_format)


def check_label(config: TableConfig, label: str) -> str:
    if not LABEL_PATTERN.match(label):
        raise MergeError(
            f"{config.table}: snapshot label {label!r}: use letters, digits, '_', '.', '-' (at most 64), "
            "e.g. 2026-11-22T1005"
        )
    return label


# -- the log ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class SnapshotRecord:
    """One live version of a snapshot label."""

    seq: int
    table: str
    label: str
    kind: str  # bootstrap | merge
    version: int
    run_id: str
    through: str  # ISO instant: the state this snapshot holds is as of here
    increments_from: str  # ISO instant: the first increment hour a merge on top of it reads
    rows: int
    files: tuple[str, ...]
    created_at: str  # wall clock, for reports only
    source: str = ""  # bootstrap: what was read (no credentials)
    aligned_offsets: dict[str, int] = field(default_factory=dict)  # bootstrap: MQ partition -> offset
    base: str = ""  # merge: "<label>@v<version>" it started from
    hours: dict[str, int] = field(default_factory=dict)  # merge: hour -> version read (0 = empty)
    changes: dict[str, int] = field(default_factory=dict)  # merge: increment rows read, deletes, ...
    location: str = ""  # object stores: the warehouse-relative version directory of its files
    # cdc.snapshot_format delta / iceberg: the table's version holding this state (the Delta
    # version; the Iceberg snapshot's sequence number)
    table_version: int = -1

    @property
    def through_at(self) -> datetime:
        return datetime.fromisoformat(self.through)

    @property
    def ref(self) -> str:
        return f"{self.label}@v{self.version}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotRecord:
        data = dict(data)
        data["files"] = tuple(data.get("files", ()))
        if "delta_version" in data:  # logs written before Iceberg snapshots (session 31)
            data["table_version"] = data.pop("delta_version")
        return cls(**data)


class SnapshotLog:
    """Sequential create-only records; the newest record of a label is its live version."""

    def __init__(self, state_dir: Location | Path, table: str) -> None:
        self.table = table
        self.root = Location(state_dir) / table / "snapshots"
        self.log_dir = self.root / "log"
        self.plans = self.root / "plans"
        self._log = SequentialLog(self.log_dir)

    def records(self) -> Iterator[SnapshotRecord]:
        for _, data in self._log.records():
            yield SnapshotRecord.from_json(data)

    def live(self) -> dict[str, SnapshotRecord]:
        """label -> its newest record."""
        current: dict[str, SnapshotRecord] = {}
        for record in self.records():
            current[record.label] = record
        return current

    def append(self, record: SnapshotRecord) -> SnapshotRecord:
        """Write ``record`` at the next free seq (another label's writer may take one first),
        as the next version of its label."""

        def placed_at(seq: int) -> dict[str, Any]:
            versions = [r.version for r in self.records() if r.label == record.label]
            return replace(record, seq=seq, version=max(versions, default=0) + 1).to_json()

        written = self._log.append(placed_at)
        if written is None:
            raise BatchConflictError(
                f"{self.table}: could not record snapshot {record.label}: the log keeps moving"
            )
        placed = SnapshotRecord.from_json(written[1])
        log.info(
            "%s: snapshot %s v%s (%s) recorded: %s rows through %s",
            self.table,
            placed.label,
            placed.version,
            placed.kind,
            placed.rows,
            placed.through,
        )
        return placed

    def plan(self, run_id: str) -> dict[str, Any] | None:
        return read_json(self.plans / f"{run_key(run_id)}.json")

    def save_plan(self, run_id: str, plan: dict[str, Any]) -> dict[str, Any]:
        """Persist a run's plan once; a retry (or a racing twin) gets the first one back."""
        create_only(self.plans / f"{run_key(run_id)}.json", plan)
        stored = self.plan(run_id)
        assert stored is not None
        return stored


def base_for(live: dict[str, SnapshotRecord], period: Period) -> SnapshotRecord | None:
    """The newest snapshot holding a state before the period's end (never the period's own)."""
    candidates = [r for r in live.values() if r.label != period.label and r.through_at < period.end]
    if not candidates:
        return None
    return max(candidates, key=lambda r: (r.through_at, r.kind == "bootstrap", r.seq))


# -- files and the metastore -------------------------------------------------------------------
class SnapshotStore:
    """Where snapshot files live and how a staged version replaces the live one.

    On local disk a label's partition is one directory, replaced by exchange. On an object
    store (no rename) every version is a directory of its own, named by what it holds
    (``Layout.snapshot_version``), written once with a marker last, and the partition is
    pointed at it in one metastore operation; replaced versions of the label are collected
    after ``output.version_retention`` of the table's processing time."""

    def __init__(self, spark: SparkSession, config: TableConfig, settings: Settings) -> None:
        self.spark = spark
        self.config = config
        self.settings = settings
        self.table = config.snapshot_table
        self.layout = Layout(settings, self.table)
        self.table_dir = self.layout.table_dir
        self.staging_root = self.layout.staging_root
        self.commit = snapshot_commit(self.layout, PARTITION_COLUMN)

    def columns(self) -> list[tuple[str, str]]:
        """(name, type) of the snapshot: the table's columns without the CDC operation."""
        op = self.config.cdc.op_field if self.config.cdc else None
        return [(c.name, c.type.ddl()) for c in self.config.schema_columns if c.name != op]

    def partition_dir(self, label: str) -> Path:
        return self.table_dir / f"{PARTITION_COLUMN}={label}"

    def schema_ddl(self) -> str:
        """The snapshot's columns as a Spark schema (what a reader of its files asks for)."""
        return ", ".join(f"{quote_identifier(n)} {t}" for n, t in self.columns())

    def read(self, record: SnapshotRecord) -> DataFrame:
        from pyspark.sql import functions as F

        if record.location:  # a version directory on an object store: pyarrow reads it
            from tidemark.sparkfiles import read_files

            store = self.layout.store
            frame = read_files(
                self.spark, [store.uri(f) for f in store.files(record.location)], self.schema_ddl()
            )
        else:
            frame = self.spark.read.schema(self.schema_ddl()).parquet(str(self.partition_dir(record.label)))
        return frame.select(*(F.col(quote_identifier(n)) for n, _ in self.columns()))

    def drop_staging(self, label: str, run_id: str) -> None:
        """After a Delta commit (or its recovery): the rows it copied from."""
        self.commit.drop_staging(self._scratch(label, run_id))

    def _scratch(self, label: str, run_id: str) -> Path:
        return self.staging_root / f"{label}-{run_key(run_id)}"

    def staged_uris(self, staged: StagedSnapshot) -> list[str]:
        """The staged version's files, as pyarrow opens them."""
        if staged.location:
            return [self.layout.store.uri(f"{staged.location}/{name}") for name in staged.files]
        return [str(staged.directory / "data" / name) for name in staged.files]

    def stage(
        self, frame: DataFrame, label: str, run_id: str, content: str, lease: Lease | None = None
    ) -> StagedSnapshot:
        """Write the rows of a new version of ``label`` where readers do not see them yet.
        ``content`` names what the run reads (its base and hours): on an object store a retry
        of the run reusing a complete version directory of the same content writes nothing;
        ``lease`` (the label's lock) owns the directory while it is written."""
        return self.commit.stage(
            self.spark,
            frame,
            label,
            self.partition_dir(label),
            self._scratch(label, run_id),
            run_id=run_id,
            content=content,
            lease=lease,
        )

    def publish(self, staged: StagedSnapshot) -> bool:
        """Make the staged version the label's partition and register it; True if atomic."""
        label = staged.label
        spec = {PARTITION_COLUMN: label}
        target, atomic = self.commit.publish(
            staged,
            self.partition_dir(label),
            metastore=HiveClientMetastore(self.spark, self.config),
            spec=spec,
            ensure_table=self.ensure_table,
        )
        self.spark.catalog.refreshTable(self.table)
        log.info(
            "%s: partition %s=%s is live at %s", self.table, PARTITION_COLUMN, label, self.layout.uri(target)
        )
        return atomic

    def discard(self, staged: StagedSnapshot, live: SnapshotRecord) -> list[str]:
        """After the record: the previous version's files (local: now in the staging directory;
        object store: replaced version directories of the label past the retention, which only
        this label's lock holder writes). Returns the version directories deleted."""

        def processing_time() -> datetime | None:
            state = Table.read(self.config, self.settings).state.commit_log.state()
            return parse_instant(state.ready.processing_time) if state.ready else None

        retention = Retention(
            # one record per label: labels are cleaned under their own locks, concurrently
            SnapshotLog(self.settings.state_location, self.config.table).root
            / f"replaced_versions-{staged.label}.json",
            processing_time,
            self.config.output.version_retention,
        )
        return self.commit.discard(staged, live.location, self.partition_dir(staged.label), retention)

    def ensure_table(self) -> None:
        location = self.commit.table_location()
        self.spark.sql(external_parquet_sql(self.table, self.columns(), [PARTITION_COLUMN], location))
        evolve_table(self.spark, self.table, self.columns(), [PARTITION_COLUMN])
