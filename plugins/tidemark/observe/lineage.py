"""What a job run read and wrote, from tidemark's own state: the lineage the Airflow tasks
report to OpenLineage (``airflow/operators.py`` turns it into events).

Read after the job, from the records it left (commit record, journal entries, snapshot
records of its run id), so the lineage is what happened, retries and no-ops included, not
what a task was asked to do. Dataset names follow the OpenLineage naming spec: a topic is
``kafka://<bootstrap>`` / ``<topic>``, a table ``hive://<metastore>`` / ``default.<table>``,
an Iceberg table by its location as the spec names file datasets (``file`` / ``<path>``,
``s3://<bucket>`` / ``<key>``: what Spark's OpenLineage integration names one too), a JDBC
source ``<scheme>://<host:port>`` / ``<database>.<table>``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlparse

from tidemark.config import TableConfig
from tidemark.config.columns import data_fields
from tidemark.hourcommit import publication_kind
from tidemark.seal.metastore import DATABASE
from tidemark.seal.rebuild_plan import plan_rebuild
from tidemark.settings import Settings
from tidemark.snapshot.snapshots import PARTITION_COLUMN, SnapshotLog
from tidemark.state.layout import Layout
from tidemark.table import Table
from tidemark.time.hours import parse_key

JOBS = ("dump", "seal", "rebuild", "bootstrap", "merge", "replay")


@dataclass(frozen=True)
class LineageDataset:
    """One dataset of a run: offsets read from a topic, partitions of a table written."""

    namespace: str
    name: str
    offsets: tuple[dict[str, int], ...] = ()  # topic: {partition, start, end} per MQ partition
    partitions: tuple[dict[str, str], ...] = ()  # table: the partition specs read or written
    columns: tuple[tuple[str, str], ...] = ()  # table: (name, Spark type)


@dataclass(frozen=True)
class JobLineage:
    inputs: tuple[LineageDataset, ...]
    outputs: tuple[LineageDataset, ...]


def topic_dataset(settings: Settings, topic: str, ranges: list[dict[str, int]]) -> LineageDataset:
    return LineageDataset(f"kafka://{settings.kafka_bootstrap}", topic, offsets=tuple(ranges))


def table_dataset(
    settings: Settings,
    table: str,
    partitions: list[dict[str, str]],
    columns: list[tuple[str, str]] | None = None,
) -> LineageDataset:
    uris = settings.hive_metastore_uris
    namespace = f"hive://{urlparse(uris.split(',')[0]).netloc}" if uris else "hive://embedded"
    return LineageDataset(
        namespace, f"{DATABASE}.{table}", partitions=tuple(partitions), columns=tuple(columns or ())
    )


def hours_dataset(
    config: TableConfig,
    settings: Settings,
    partitions: list[dict[str, str]],
    columns: list[tuple[str, str]] | None = None,
) -> LineageDataset:
    """The table's hours: its Hive table, or an Iceberg table by its location."""
    if publication_kind(config.output.table_format).in_metastore:
        return table_dataset(settings, config.table, partitions, columns)
    return _location_dataset(settings, config.table, partitions, columns)


def snapshot_dataset(config: TableConfig, settings: Settings, label: str) -> LineageDataset:
    """A snapshot label: of the Hive table (Parquet partitions, Delta's views), or of an
    Iceberg snapshot table by its location (the label is its tag)."""
    partitions = [{PARTITION_COLUMN: label}]
    if config.cdc is not None and config.cdc.snapshot_format == "iceberg":
        return _location_dataset(settings, config.snapshot_table, partitions)
    return table_dataset(settings, config.snapshot_table, partitions)


def _location_dataset(
    settings: Settings,
    table: str,
    partitions: list[dict[str, str]],
    columns: list[tuple[str, str]] | None = None,
) -> LineageDataset:
    layout = Layout(settings, table)
    location = layout.uri(layout.table_dir)
    scheme, found, rest = location.partition("://")
    namespace, name = (
        (f"{scheme}://{rest.split('/', 1)[0]}", rest.split("/", 1)[1]) if found else ("file", location)
    )
    return LineageDataset(namespace, name, partitions=tuple(partitions), columns=tuple(columns or ()))


def source_dataset(described: str) -> LineageDataset:
    """The bootstrap source from its description (``jdbc <url> <table>`` or ``files <path>``)."""
    kind, _, rest = described.partition(" ")
    location, _, what = rest.partition(" ")
    if kind == "jdbc" and location.startswith("jdbc:"):
        url = urlparse(location.removeprefix("jdbc:"))
        database = url.path.strip("/")
        table = what.split(",")[0].strip() or "query"
        host = url.netloc.rpartition("@")[2]  # never the user:password@ some JDBC URLs carry
        return LineageDataset(f"{url.scheme}://{host}", f"{database}.{table}" if database else table)
    return LineageDataset("file", location)


def _hour_spec(config: TableConfig, key: str) -> dict[str, str]:
    return dict(parse_key(key, config.event_time.time_zone).spec)


def _path_spec(path: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in path.split("/") if "=" in part)


def _columns(config: TableConfig) -> list[tuple[str, str]]:
    return data_fields(config)


def job_lineage(job: str, config: TableConfig, settings: Settings, run_id: str) -> JobLineage:
    """The datasets the ``job`` run ``run_id`` of a table read and wrote (empty: it did nothing)."""
    if job in ("dump", "replay"):
        return _dump(config, settings, run_id)
    if job in ("seal", "rebuild"):
        return _hours(job, config, settings, run_id)
    if job in ("bootstrap", "merge"):
        return _snapshot(job, config, settings, run_id)
    raise ValueError(f"no lineage for job {job!r}; expected one of {', '.join(JOBS)}")


def _dump(config: TableConfig, settings: Settings, run_id: str) -> JobLineage:
    log = Table.read(config, settings).state.commit_log
    inputs: list[LineageDataset] = []
    outputs: list[LineageDataset] = []
    for run in (run_id, f"{run_id}__replay"):  # the dump task's own replay runs as <run id>__replay
        batch = log.batch_of_run(run)
        commit = log.commit(batch) if batch is not None else None
        if commit is None:
            continue
        if commit.ranges:
            ranges = [{"partition": r.mq_partition, "start": r.start, "end": r.end} for r in commit.ranges]
            inputs.append(topic_dataset(settings, commit.topic, ranges))
        if commit.replayed_batches:
            inputs.append(
                table_dataset(
                    settings, config.dirty_table, [{"batch_id": str(b)} for b in commit.replayed_batches]
                )
            )
        hours = [_path_spec(p) for p in sorted(commit.rows_per_hour)]
        outputs.append(hours_dataset(config, settings, hours, _columns(config)))
        if commit.late_per_hour and config.late_policy == "side_table":
            late = [_path_spec(p) for p in sorted(commit.late_per_hour)]
            outputs.append(table_dataset(settings, config.late_table, late, _columns(config)))
        if commit.dirty:
            outputs.append(table_dataset(settings, config.dirty_table, [{"batch_id": str(commit.batch_id)}]))
    return JobLineage(tuple(inputs), tuple(outputs))


def _hours(job: str, config: TableConfig, settings: Settings, run_id: str) -> JobLineage:
    """Seal: the hours it made visible (from the table's committed batches); rebuild: the
    offsets it re-read and the hours it swapped in."""

    journal = Table.read(config, settings).state.journal
    kinds = {"rebuild"} if job == "rebuild" else {"seal", "amend", "release"}
    # every entry of the run (a later step of an hour does not hide what this run wrote)
    entries = {e.hour: e for e in journal.entries() if e.run_id == run_id and str(e.kind) in kinds}.values()
    if not entries:
        return JobLineage((), ())
    hours = [_hour_spec(config, e.hour) for e in sorted(entries, key=lambda e: e.hour)]
    output = hours_dataset(config, settings, hours, _columns(config))
    if job == "seal":  # sealed from the batches the dumps committed (the table's open hours)
        return JobLineage((hours_dataset(config, settings, hours),), (output,))
    ranges: dict[int, dict[str, int]] = {}
    for entry in entries:
        for source in plan_rebuild(config, settings, entry.hour, journal.state()).sources:
            for r in source.ranges:
                seen = ranges.setdefault(
                    r.mq_partition, {"partition": r.mq_partition, "start": r.start, "end": r.end}
                )
                seen["start"], seen["end"] = min(seen["start"], r.start), max(seen["end"], r.end)
    read = (
        [topic_dataset(settings, config.source.topic, [ranges[p] for p in sorted(ranges)])] if ranges else []
    )
    return JobLineage(tuple(read), (output,))


def _snapshot(job: str, config: TableConfig, settings: Settings, run_id: str) -> JobLineage:
    records = [
        r
        for r in SnapshotLog(settings.state_location, config.table).records()
        if r.run_id == run_id and r.kind == job
    ]
    if not records:
        return JobLineage((), ())
    record = records[-1]
    output = snapshot_dataset(config, settings, record.label)
    if job == "bootstrap":
        inputs: list[LineageDataset] = [source_dataset(record.source)]
        if record.aligned_offsets:  # the topic position the snapshot is aligned with
            aligned = [
                {"partition": int(p), "start": o, "end": o} for p, o in sorted(record.aligned_offsets.items())
            ]
            inputs.append(topic_dataset(settings, config.source.topic, aligned))
        return JobLineage(tuple(inputs), (output,))
    hours = [_hour_spec(config, key) for key, version in sorted(record.hours.items()) if version]
    inputs = [hours_dataset(config, settings, hours)]
    if record.base:
        label = record.base.split("@", 1)[0]
        inputs.append(snapshot_dataset(config, settings, label))
    return JobLineage(tuple(inputs), (output,))


def as_json(lineage: JobLineage) -> dict[str, Any]:
    return asdict(lineage)
