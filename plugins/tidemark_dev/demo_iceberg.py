"""The demo's Iceberg table: the clickstream once more, landed as an Iceberg table
(``output.table_format: iceberg``) by the same ingest DAG, then read back by its name in the
Iceberg catalog by two engines that never ran a tidemark job: pyiceberg and DuckDB. Each
sealed hour is one snapshot, and its summary says which batches and offsets it holds."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from tidemark.catalog import load_table
from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.masking import mask_text
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark_dev.console import Console
from tidemark_dev.duckdb_reader import duckdb_connection
from tidemark_dev.generator import create_topic, events, produce

ICEBERG_TABLE = "events_iceberg"


def write_iceberg_config(conf_dir: Path, events_yaml: Path, topic: str) -> None:
    """The events table's YAML as an Iceberg table on a topic of its own."""
    data = yaml.safe_load(events_yaml.read_text())
    data["table"] = ICEBERG_TABLE
    data["description"] = "Clickstream events as an Iceberg table (one snapshot per sealed hour)."
    data["source"].update(topic=topic, consumer_group=f"tidemark-{ICEBERG_TABLE}")
    data.setdefault("output", {})["table_format"] = "iceberg"
    (conf_dir / f"{ICEBERG_TABLE}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def run_iceberg(console: Console, demo: Settings, dag: Any, start: datetime, scale: int) -> bool:
    """One ingest run of the Iceberg table, then its rows read by name by pyiceberg and DuckDB;
    True when both read every row the commit log counts in the sealed hours."""
    config = load_table(ICEBERG_TABLE, demo)
    topic = config.source.topic
    create_topic(demo.kafka_bootstrap, topic, 2)
    clicks = list(events(scale // 6, start=start, span=timedelta(hours=2, minutes=30), partitions=2, seed=17))
    console.say("")
    console.say(
        f"{ICEBERG_TABLE}: the clickstream as an Iceberg table (catalog {mask_text(demo.iceberg_catalog_url)}), topic {topic}"
    )
    produced = len(produce(demo.kafka_bootstrap, topic, clicks))
    processing = start + timedelta(hours=3)
    with console.step(
        f"{ICEBERG_TABLE}-run", f"one run at {processing:%H:%M}: {produced:,} messages; ingest DAG"
    ):
        dag.test(logical_date=processing, run_after=processing)
    state = CommitLog(demo.state_location, ICEBERG_TABLE).state()
    table = open_catalog(demo).load_table(identifier(ICEBERG_TABLE))
    snapshots = [dict(s.summary.additional_properties) for s in table.snapshots() if s.summary]
    hours = sorted(s["tidemark.hour"] for s in snapshots)
    expected = sum(n for path, n in state.rows_per_hour.items() if _key(path) in hours)
    by_pyiceberg = table.scan().to_arrow().num_rows
    by_duckdb = _duckdb_count(table.metadata_location)
    console.say(f"   {len(snapshots)} snapshots, one per sealed hour: {', '.join(hours) or 'none yet'}")
    if snapshots:
        last = snapshots[-1]
        console.say(
            f"   the last one's summary: hour {last['tidemark.hour']} v{last['tidemark.version']}, run "
            f"{last['tidemark.run-id']}, batches {json.loads(last['tidemark.batches'])}"
        )
    ok = bool(hours) and by_pyiceberg == by_duckdb == expected
    console.say(
        f"   read by name: pyiceberg {by_pyiceberg:,} rows, DuckDB {by_duckdb:,} rows; the commit log's "
        f"rows of the sealed hours {expected:,}: {'OK' if ok else 'MISMATCH'}"
    )
    return ok


def _key(path: str) -> str:
    """``dt=2026-11-22/hr=08`` as the hour key ``2026-11-22T08``."""
    dt, hr = (part.split("=", 1)[1] for part in path.split("/")[:2])
    return f"{dt}T{hr}"


def _duckdb_count(metadata_location: str) -> int:
    row = duckdb_connection().sql(f"SELECT count(*) FROM iceberg_scan('{metadata_location}')").fetchone()
    return int(row[0]) if row else 0
