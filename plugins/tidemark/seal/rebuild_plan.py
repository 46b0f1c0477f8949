"""What rebuilding an hour reads: the batches that fed it, their offset ranges and the rows the
commit log counted (pure planning over the state; no Spark, no files). See ``rebuild`` for
the rebuild itself."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from tidemark.config import TableConfig
from tidemark.errors import DataLossError, EarlierTopicError, HourRangeError, RebuildError
from tidemark.ingest.identity import SourceIdentity
from tidemark.settings import Settings
from tidemark.state.batches import MqRange
from tidemark.state.dirty_retention import dropped_through
from tidemark.state.journal import JournalState
from tidemark.table import Table
from tidemark.time.hours import Hour, hour_of, parse_key

log = logging.getLogger(__name__)

MAX_HOURS_PER_RUN = 168  # one week: a larger range is almost certainly a typo in the trigger form


@dataclass(frozen=True)
class HourSource:
    """One committed batch that fed the hour: what it read and what it counted for the hour."""

    batch_id: int
    run_id: str
    processing_time: str
    clock: str  # the plan's clock: future event times were judged against it
    sealed_through: str | None
    ranges: tuple[MqRange, ...]
    records: int  # records the batch read from the broker (reconciled against the re-read)
    rows: int  # on-time rows of the hour
    late: int  # late rows of the hour
    replayed: tuple[int, ...] = ()  # a replay: the batches whose dirty records it classified again
    schema_version: int | None = None  # the schema it was classified with (None: the current one)
    topic: str = ""  # the topic it read (its commit's)
    topic_id: str | None = None  # the topic's id when it read (None: the broker gave none)


@dataclass(frozen=True)
class RebuildPlan:
    table: str
    hour: str
    kind: str  # the hour's current journal kind
    version: int  # its current version
    include_late: bool
    through_batch: int  # the last committed batch considered
    sources: tuple[HourSource, ...]
    # MQ partition -> the batch whose rebase restarted its offsets (the commit log's): batches
    # before it read offsets that now name other records
    restarted_at: dict[int, int] = field(default_factory=dict)

    @property
    def expected_rows(self) -> int:
        return sum(s.rows + (s.late if self.include_late else 0) for s in self.sources)

    @property
    def expected_late(self) -> int:
        return sum(s.late for s in self.sources) if self.include_late else 0

    def describe(self) -> str:
        batches = ", ".join(
            f"b{s.batch_id} ("
            + " ".join(f"[{r.mq_partition}] {r.start}..{r.end - 1}" for r in s.ranges if r.size)
            + (f"replay of the dirty records of b{', b'.join(map(str, s.replayed))}" if s.replayed else "")
            + f": {s.rows} rows{f', {s.late} late' if s.late else ''})"
            for s in self.sources
        )
        late = "with its late rows" if self.include_late else "late rows stay in the late table"
        return (
            f"{self.table} hour {self.hour} ({self.kind} v{self.version}): {self.expected_rows} rows "
            f"({late}) from {len(self.sources)} batches: {batches or 'none (empty hour)'}"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def hours_between(start: datetime, end: datetime, zone: str) -> list[Hour]:
    """The hours of ``zone`` starting in [start, end): an Airflow data interval's hours."""
    hours = []
    hour = hour_of(start, zone)
    if hour.start < start:
        hour = hour.next()
    while hour.start < end:
        hours.append(hour)
        hour = hour.next()
    return hours


def hour_range(first_key: str, last_key: str, zone: str) -> list[Hour]:
    """Hours ``first_key`` .. ``last_key`` inclusive (trigger-form params), validated."""
    first, last = parse_key(first_key, zone), parse_key(last_key, zone)
    if last < first:
        raise HourRangeError(f"hour range {first_key} .. {last_key}: the last hour is before the first")
    hours = hours_between(first.start, last.end, zone)
    if len(hours) > MAX_HOURS_PER_RUN:
        raise HourRangeError(
            f"hour range {first_key} .. {last_key} has {len(hours)} hours; at most {MAX_HOURS_PER_RUN} "
            "per run (use a backfill over the rebuild DAG for longer ranges)"
        )
    return hours


def plan_rebuild(
    config: TableConfig, settings: Settings, hour_key: str, partitions: JournalState | None = None
) -> RebuildPlan:
    """What rebuilding ``hour_key`` reads; refuses hours that are not published."""
    hour = parse_key(hour_key, config.event_time.time_zone)
    partitions = partitions or Table.read(config, settings).state.journal.state()
    current = partitions.hours.get(hour.key)
    if partitions.dropped_by_retention(hour.start):
        raise RebuildError(
            f"{config.table} hour {hour.key} was dropped by retention (retention.hours = "
            f"{config.retention.hours}; the first hour kept starts at {partitions.kept_from}): nothing to rebuild"
        )
    if current is None:
        raise RebuildError(
            f"{config.table} hour {hour.key} is not sealed yet (sealed through {partitions.sealed_through}); "
            "the ingest DAG seals it, there is nothing to rebuild"
        )
    if not current.published:
        raise RebuildError(
            f"{config.table} hour {hour.key} is {current.kind}d, not published; check it with "
            f"tidemark status --table {config.table} --partition {hour.key} and release it first"
        )
    commit_log = Table.read(config, settings).state.commit_log
    state = commit_log.state()
    # the checkpoint's hour index names the batches to read (an older one: every commit)
    indexed = state.batches_of_hour(hour.path)
    commits = (
        (c for c in (commit_log.commit(b) for b in indexed) if c is not None)
        if indexed is not None
        else commit_log.iter_commits()
    )
    sources = []
    dirty_gone = dropped_through(Table.read(config, settings).state.journal.root)
    for commit in commits:
        rows = commit.rows_per_hour.get(hour.path, 0)
        late = commit.late_per_hour.get(hour.path, 0)
        if not rows and not late:
            continue
        if (commit.dirty and commit.batch_id <= dirty_gone) or any(
            b <= dirty_gone for b in commit.replayed_batches
        ):
            raise RebuildError(
                f"{config.table} hour {hour.key}: batch {commit.batch_id} fed it, and retention.dirty "
                f"({config.retention.dirty}) has dropped the dirty records of batches through {dirty_gone}: "
                "a rebuild could no longer tell the records that batch left dirty (or re-read a "
                "replay's input), so the hour stays as it is"
            )
        plan = commit_log.plan(commit.batch_id)
        sources.append(
            HourSource(
                batch_id=commit.batch_id,
                run_id=commit.run_id,
                processing_time=commit.processing_time,
                clock=plan.clock if plan else commit.processing_time,
                sealed_through=plan.sealed_through if plan else None,
                ranges=commit.ranges,
                records=sum(p.read for p in commit.mq_partitions) if not commit.replayed_batches else 0,
                rows=rows,
                late=late,
                replayed=commit.replayed_batches,
                schema_version=plan.schema_version if plan else None,
                topic=commit.topic,
                topic_id=str(commit.extra.get("topic_id") or "") or (plan.topic_id if plan else None),
            )
        )
    return RebuildPlan(
        table=config.table,
        hour=hour.key,
        kind=current.kind,
        version=current.version,
        include_late=config.late_policy == "amend",
        through_batch=state.last_committed,
        sources=tuple(sources),
        restarted_at=dict(state.restarted_at),
    )


@dataclass(frozen=True)
class RebuildSelection:
    """The hours a rebuild run will rebuild among those it considered (the rebuild DAG's plan
    task skips the run when ``skip_reason`` says so)."""

    table: str
    considered: tuple[str, ...]
    chosen: tuple[str, ...]
    dry_run: bool = False

    @property
    def skip_reason(self) -> str | None:
        if self.dry_run:
            return f"{self.table}: dry run; would rebuild {', '.join(self.chosen) or 'nothing'}"
        if not self.chosen:
            return (
                f"{self.table}: no sealed hour among {', '.join(self.considered) or 'none'}; "
                "nothing to rebuild"
            )
        return None


def planned_hours(
    config: TableConfig,
    settings: Settings,
    *,
    interval: tuple[datetime | None, datetime | None],
    first_hour: str | None = None,
    last_hour: str | None = None,
    dry_run: bool = False,
) -> RebuildSelection:
    """The sealed hours of a rebuild run (the trigger form's range, else the data interval),
    each plan logged. Open hours are left out; a quarantined one fails the run."""
    zone = config.event_time.time_zone
    if first_hour:
        hours = hour_range(first_hour, last_hour or first_hour, zone)
    else:
        start, end = interval
        if start is None or end is None:
            raise HourRangeError(
                f"{config.table}: a manual run needs the first_hour param (no data interval)"
            )
        hours = hours_between(start, end, zone)
    partitions = Table.read(config, settings).state.journal.state()
    chosen = []
    for hour in hours:
        try:
            plan = plan_rebuild(config, settings, hour.key, partitions)
        except RebuildError as exc:
            if hour.key in partitions.hours:  # quarantined: the run must not look green
                raise
            log.warning("skipping: %s", exc)
            continue
        log.info("%s: %s", "dry run" if dry_run else "will rebuild", plan.describe())
        chosen.append(hour.key)
    return RebuildSelection(config.table, tuple(h.key for h in hours), tuple(chosen), dry_run)


def check_offsets(
    plan: RebuildPlan, topic: str, broker: dict[int, tuple[int, int]], identity: SourceIdentity | None = None
) -> None:
    """Every range the hour needs must still be on the broker, in the same topic and the same
    incarnation of it (``identity``: the broker's now): else DataLossError (EarlierTopicError
    for offsets that now name other records)."""
    check_sources(plan, topic, identity)
    for source in plan.sources:
        for r in source.ranges:
            if not r.size:
                continue
            earliest, latest = broker.get(r.mq_partition, (0, 0))  # a vanished partition holds nothing
            missing = None
            if r.start < earliest:
                missing = (r.start, min(earliest, r.end))
            elif latest < r.end:
                missing = (max(r.start, latest), r.end)
            if missing:
                raise DataLossError(
                    topic,
                    r.mq_partition,
                    *missing,
                    when=f"but hour {plan.hour} of {plan.table} needs them (batch {source.batch_id})",
                    hint="the published hour was left untouched; it can only be rebuilt from a topic "
                    "that still holds these offsets",
                )


def check_sources(plan: RebuildPlan, topic: str, identity: SourceIdentity | None) -> None:
    """EarlierTopicError unless every range the hour needs was read from ``topic`` as the
    broker has it now (``identity``), after the last time its offsets started over."""
    for source in plan.sources:
        for r in source.ranges:
            why = _read_elsewhere(plan, source, r.mq_partition, topic, identity) if r.size else None
            if why:
                raise EarlierTopicError(
                    topic, r.mq_partition, r.start, r.end, table=plan.table, hour=plan.hour, why=why
                )


def _read_elsewhere(
    plan: RebuildPlan, source: HourSource, partition: int, topic: str, identity: SourceIdentity | None
) -> str | None:
    """Why batch ``source``'s offsets of ``partition`` are not the broker's offsets of the same
    numbers now, if they are not."""
    if source.topic and source.topic != topic:
        return f"were read by batch {source.batch_id} from topic {source.topic}, not {topic}"
    if (
        source.topic_id
        and identity is not None
        and identity.topic_id
        and source.topic_id != identity.topic_id
    ):
        return (
            f"were read by batch {source.batch_id} from an earlier incarnation of topic {topic} (topic id "
            f"{source.topic_id}; the broker's topic has id {identity.topic_id})"
        )
    restarted = plan.restarted_at.get(partition, -1)
    if restarted > source.batch_id:
        return (
            f"were read by batch {source.batch_id}, before the topic's offsets started over (the rebase of "
            f"batch {restarted})"
        )
    return None
