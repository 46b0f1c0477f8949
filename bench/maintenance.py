"""Maintenance: what compaction and retention give back on a table that late amendments split.

    .venv/bin/python bench/maintenance.py [--days 30] [--amends 5] [--events 20] [--keep-days 7]

In a scratch TIDEMARK_HOME (local disk, embedded Derby, the broker of this machine: tansu as
a fast source, started if needed) it builds an events table (``late_policy: amend``) of
``--days`` days of sealed hours, ``--events`` records per hour and MQ partition (2), through
the real jobs in one Spark session (``run_dump``, ``run_seal``); then ``--amends`` rounds of
one late record per hour, each dumped and sealed, so each hour gains a file per round. Then:

- ``files/hour``: the mean of the sealed hours' files, before and after ``run_compaction``;
- the scan of one day by name through the metastore (``count(*)`` and a distinct count of
  ``event_id``, the median of 3 runs after one warm-up), before and after; ``scan after/before``;
- the bytes retention reclaims when it keeps ``--keep-days`` days (no grace: the bench owns
  the table; a drop's files go with the run after it, as with the next day's maintenance).

It prints ``files/hour before = X, after = Y``, ``scan after/before = R`` and
``retention reclaimed = B bytes`` last. Not a test: the figures are for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tidemark.config import load_table_file
from tidemark.ingest.dump import run_dump
from tidemark.retention import run_retention
from tidemark.seal.recompact import run_compaction
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.spark import build_session
from tidemark.state.journal import HourJournal
from tidemark_dev.generator import create_topic, produce, records
from tidemark_dev.local import TansuService

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2026, 10, 1, tzinfo=UTC)


def table_yaml(conf_dir: Path, topic: str) -> Path:
    data = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    data.update(table="bench_maint", late_policy="amend")
    data["source"]["topic"] = topic
    data["source"]["max_records_per_partition"] = 1_000_000
    data.setdefault("output", {})["version_retention"] = "0s"
    data.pop("retention", None)
    conf_dir.mkdir(parents=True, exist_ok=True)
    path = conf_dir / "bench_maint.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def files_per_hour(settings: Settings, table: str) -> float:
    hours = HourJournal(settings.state_location, table).state().hours.values()
    return statistics.mean(len(e.files) for e in hours if e.published)


def scan_seconds(spark: Any, table: str, day: str) -> float:
    """The median of 3 timed scans of one day by name, after one warm-up."""
    spark.catalog.refreshTable(table)
    query = f"SELECT count(*), count(DISTINCT event_id) FROM `{table}` WHERE dt = '{day}'"
    spark.sql(query).collect()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        spark.sql(query).collect()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build(spark: Any, config: Any, settings: Settings, args: argparse.Namespace) -> datetime:
    """The sealed days, then the amend rounds; returns the end of the last hour."""
    topic, hours = config.source.topic, args.days * 24
    end = START + timedelta(hours=hours)
    spread = [
        (p, START + timedelta(hours=h, minutes=m * 60 // args.events))
        for h in range(hours)
        for p in (0, 1)
        for m in range(args.events)
    ]
    produce(settings.kafka_bootstrap, topic, records(spread))
    produce(
        settings.kafka_bootstrap,
        topic,
        records([(p, end + timedelta(minutes=40)) for p in (0, 1)], prefix="wm"),
    )
    t0 = time.perf_counter()
    run_dump(spark, config, settings, "run-0", end + timedelta(minutes=50))
    run_seal(spark, config, settings, "run-0")
    print(f"{hours} hours sealed in {time.perf_counter() - t0:.1f} s", flush=True)
    for round_ in range(1, args.amends + 1):
        t0 = time.perf_counter()
        late = [(round_ % 2, START + timedelta(hours=h, minutes=59)) for h in range(hours)]
        produce(settings.kafka_bootstrap, topic, records(late, prefix=f"late{round_}"))
        run_dump(spark, config, settings, f"run-{round_}", end + timedelta(minutes=50 + round_))
        run_seal(spark, config, settings, f"run-{round_}")
        print(f"amend round {round_}: {hours} hours amended in {time.perf_counter() - t0:.1f} s", flush=True)
    return end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--amends", type=int, default=5)
    parser.add_argument("--events", type=int, default=20, help="records per hour and MQ partition")
    parser.add_argument("--keep-days", type=int, default=7)
    args = parser.parse_args(argv)

    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-maint-"))
    os.environ.update(TIDEMARK_HOME=str(home), TIDEMARK_CONF_DIR=str(home / "conf"))
    settings = Settings.from_env()
    broker = TansuService(settings)
    started_here = not broker.status().running
    broker.start()
    try:
        topic = f"bench_{uuid.uuid4().hex[:8]}"
        config = load_table_file(table_yaml(settings.conf_dir, topic))
        create_topic(settings.kafka_bootstrap, topic, 2)
        spark = build_session("tidemark-bench-maintenance", settings, hive=True)
        end = build(spark, config, settings, args)
        day = (START + timedelta(days=args.days // 2)).strftime("%Y-%m-%d")
        before_files, before_scan = (
            files_per_hour(settings, config.table),
            scan_seconds(spark, config.table, day),
        )
        t0 = time.perf_counter()
        compacted = run_compaction(spark, config, settings, "maintain-1")
        print(f"compaction: {len(compacted.compacted)} hours in {time.perf_counter() - t0:.1f} s", flush=True)
        after_files, after_scan = (
            files_per_hour(settings, config.table),
            scan_seconds(spark, config.table, day),
        )
        keep = config.model_copy(
            update={"retention": config.retention.model_validate({"hours": f"{args.keep_days}d"})}
        )
        dropped = run_retention(spark, keep, settings, "maintain-2", end)
        # the files of a drop go once the grace has passed since it was recorded: the next run
        # (none here), as the next day's maintenance run would
        reclaimed = run_retention(spark, keep, settings, "maintain-3", end)
        print(
            f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{datetime.now(UTC):%Y-%m-%d}; {args.days} days x {args.events * 2} records/hour, "
            f"{args.amends} amends per hour"
        )
        print(f"scan of {day}: before = {before_scan:.3f} s, after = {after_scan:.3f} s")
        print(f"files/hour before = {before_files:.1f}, after = {after_files:.1f}")
        print(f"scan after/before = {after_scan / before_scan:.2f}")
        print(
            f"retention reclaimed = {reclaimed.bytes_deleted} bytes in {reclaimed.files_deleted} files "
            f"({len(dropped.dropped)} hours past {args.keep_days} days)"
        )
        spark.stop()
        return 0
    finally:
        if started_here:
            broker.stop()  # before its pid file goes with the scratch home
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
