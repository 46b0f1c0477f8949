"""Snapshot merge: a 10M-row snapshot + 1M increment rows on local[2], against a plain copy.

    .venv/bin/python bench/merge.py [--snapshot-rows 10000000] [--increment-rows 1000000]
                                    [--formats parquet,delta] [--hot 1.0]

In a scratch TIDEMARK_HOME it writes (worker ``prepare``, not timed) a bootstrap snapshot of N
orders and M change rows spread over the 24 sealed hours of 2026-11-22 (60% updates of
existing orders, 30% inserts, 10% deletes, 5% of them sent twice), journaled as sealed like
the ingest DAG would leave them. Then, each in its own process:

(a) ``run_merge`` of snapshot 2026-11-22, exactly as spark_jobs/merge.py runs it (plan,
    dedup by (version, offset), deletes, write, swap, register, record);
(b) baseline: the same session reads the snapshot and the increments and writes them out
    unchanged (no dedup): the I/O floor of any merge on this machine;
(c) with ``delta`` in ``--formats`` (``cdc.snapshot_format: delta``, its own scratch home and
    a Delta bootstrap of the same N orders): ``run_merge`` again, now one record-level MERGE
    of the newest change per key into the Delta table (issue 19's goal: at most 0.5x of a).

``--hot F``: updates and deletes hit the newest fraction F of the orders (1.0: uniformly over
all of them; CDC updates of orders mostly hit recent ones, and a Delta MERGE rewrites only
the files holding changed keys).

Prints wall time, processing time (after the session started), rows/s (snapshot + increment
rows per processing second) and peak RSS of the process tree, and the ratio a/b.
Not a test: the figures are for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump_throughput import run_measured

from tidemark.config import load_table_file
from tidemark.settings import Settings
from tidemark.snapshot.delta import DeltaSnapshot, is_delta
from tidemark.snapshot.merge import run_merge
from tidemark.snapshot.snapshots import SnapshotLog, SnapshotRecord, SnapshotStore
from tidemark.spark import build_session
from tidemark.state.journal import HourJournal, JournalEntry
from tidemark.time.hours import hour_of

ROOT = Path(__file__).resolve().parents[1]
DAY = datetime(2026, 11, 22, tzinfo=UTC)


def _settings_and_config() -> tuple[Any, Any]:
    config = load_table_file(ROOT / "conf" / "tables" / "orders.yaml")
    fmt = os.environ.get("TIDEMARK_BENCH_FORMAT", "parquet")
    config = config.model_copy(update={"cdc": config.cdc.model_copy(update={"snapshot_format": fmt})})
    return Settings.from_env(), config


def prepare(snapshot_rows: int, increment_rows: int, hot: float) -> dict[str, Any]:
    """Write the base snapshot, the sealed increment hours and their journal entries."""
    from pyspark.sql import functions as F

    settings, config = _settings_and_config()
    spark = build_session("tidemark-bench-prepare", settings, hive=True)
    store = SnapshotStore(spark, config, settings)
    base = spark.range(snapshot_rows).select(
        (F.col("id") + 1).alias("order_id"),
        F.lit(1).cast("bigint").alias("version"),
        (F.col("id") % 5000).alias("customer_id"),
        F.lit("created").alias("status"),
        (F.col("id") % 90000 / 100).cast("decimal(12,2)").alias("amount"),
        F.lit(DAY - timedelta(hours=1)).cast("timestamp").alias("updated_at"),
    )
    staged = store.stage(base, "base", "bench", "bench base")
    record = SnapshotRecord(
        seq=-1,
        table=config.table,
        label="base",
        kind="bootstrap",
        version=1,
        run_id="bench",
        through=DAY.isoformat(),
        increments_from=DAY.isoformat(),
        rows=staged.rows,
        files=staged.files,
        created_at=DAY.isoformat(),
    )
    if is_delta(config):  # spark.range is in key order, as a Delta bootstrap sorts it
        delta = DeltaSnapshot(spark, config, settings)
        record = delta.overwrite([staged.directory / "data" / f for f in staged.files], record)
    else:
        store.publish(staged)
    SnapshotLog(settings.state_location, config.table).append(record)
    # Changes: updates (60%) and deletes (10%) of the newest ``hot`` share of the orders,
    # inserts (30%) of new ids above N.
    pool = max(1, int(snapshot_rows * hot))
    span = 24 * 3600
    changes = spark.range(increment_rows).select(
        F.col("id"),
        F.when(F.col("id") % 10 < 6, F.lit("u"))
        .when(F.col("id") % 10 < 9, F.lit("c"))
        .otherwise(F.lit("d"))
        .alias("op"),
        (F.col("id") * 7919 % pool + (snapshot_rows - pool) + 1).alias("existing"),
        (F.col("id") % 4).cast("int").alias("_mq_partition"),
        (F.col("id") / 4).cast("bigint").alias("_mq_offset"),
        (F.col("id") * span / increment_rows).cast("bigint").alias("second"),
    )
    changes = changes.select(
        "op",
        F.when(F.col("op") == "c", F.col("id") + snapshot_rows + 1)
        .otherwise(F.col("existing"))
        .alias("order_id"),
        (F.col("id") % 3 + 2).cast("bigint").alias("version"),
        (F.col("id") % 5000).alias("customer_id"),
        F.lit("paid").alias("status"),
        (F.col("id") % 90000 / 100).cast("decimal(12,2)").alias("amount"),
        (F.lit(DAY).cast("timestamp") + F.make_interval(secs=F.col("second"))).alias("updated_at"),
        "_mq_partition",
        "_mq_offset",
        F.lit(0).cast("bigint").alias("_mq_timestamp"),
        F.lit(0).cast("bigint").alias("_batch_id"),
    )
    twice = changes.filter(F.col("_mq_offset") % 20 == 0)
    changes = changes.unionByName(twice)
    hour_cols = (
        F.date_format("updated_at", "yyyy-MM-dd").alias("dt"),
        F.date_format("updated_at", "HH").alias("hr"),
    )
    table_dir = Path(settings.warehouse) / config.table
    changes.select("*", *hour_cols).write.partitionBy("dt", "hr").mode("overwrite").parquet(str(table_dir))
    journal = HourJournal(settings.state_location, config.table)
    for seq, hour in enumerate(hour_of(DAY + timedelta(hours=h), "UTC") for h in range(24)):
        journal.append(
            JournalEntry(
                seq=seq,
                table=config.table,
                hour=hour.key,
                hour_start=hour.start.isoformat(),
                hour_end=hour.end.isoformat(),
                kind="seal",
                version=1,
                rows=0,
                late=0,
                files=(),
                sealed_at=hour.end.isoformat(),
                run_id="bench",
                ready_time=hour.end.isoformat(),
                processing_time=hour.end.isoformat(),
                folded_through_batch=-1,
            )
        )
    increments = spark.read.parquet(str(table_dir)).count()
    spark.stop()
    return {"snapshot_rows": staged.rows, "increment_rows": increments, "snapshot_files": len(record.files)}


def merge() -> dict[str, Any]:
    settings, config = _settings_and_config()
    started = time.perf_counter()
    spark = build_session("tidemark-bench-merge", settings, hive=True)
    session = time.perf_counter() - started
    result = run_merge(spark, config, settings, "bench-merge", "2026-11-22")
    processing = time.perf_counter() - started - session
    spark.stop()

    changes = SnapshotLog(settings.state_location, config.table).live()["2026-11-22"].changes
    return {
        "session_s": session,
        "processing_s": processing,
        "rows_out": result.rows,
        "files_rewritten": changes.get("files_rewritten", "all"),
    }


def copy() -> dict[str, Any]:
    settings, config = _settings_and_config()
    started = time.perf_counter()
    spark = build_session("tidemark-bench-copy", settings, hive=True)
    session = time.perf_counter() - started
    store = SnapshotStore(spark, config, settings)
    base = spark.read.parquet(str(store.partition_dir("base")))
    changes = spark.read.parquet(str(Path(settings.warehouse) / config.table)).select(*base.columns)
    out = Path(settings.home) / "copy"
    base.unionByName(changes).write.mode("overwrite").parquet(str(out))
    processing = time.perf_counter() - started - session
    rows = spark.read.parquet(str(out)).count()
    spark.stop()
    return {"session_s": session, "processing_s": processing, "rows_out": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot-rows", type=int, default=10_000_000)
    parser.add_argument("--increment-rows", type=int, default=1_000_000)
    parser.add_argument("--formats", default="parquet,delta")
    parser.add_argument("--hot", type=float, default=1.0)
    parser.add_argument("--worker", choices=("prepare", "merge", "copy"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        workers = {
            "prepare": lambda: prepare(args.snapshot_rows, args.increment_rows, args.hot),
            "merge": merge,
            "copy": copy,
        }
        print(json.dumps(workers[args.worker]()))
        return 0
    worker = [sys.executable, __file__, "--snapshot-rows", str(args.snapshot_rows), "--hot", str(args.hot)]
    worker += ["--increment-rows", str(args.increment_rows), "--worker"]
    print(f"machine: {platform.node()} {os.cpu_count()} cores, python {platform.python_version()}")
    measured = {}
    for fmt in args.formats.split(","):
        home = Path(tempfile.mkdtemp(prefix=f"tidemark-bench-merge-{fmt}-"))
        env = {
            **os.environ,
            "TIDEMARK_HOME": str(home),
            "TIDEMARK_WAREHOUSE": str(home / "warehouse"),
            "TIDEMARK_BENCH_FORMAT": fmt,
        }
        sizes, prep_wall, _ = run_measured([*worker, "prepare"], env)
        print(f"{fmt}: prepared in {prep_wall:.0f} s in {home}: {sizes}")
        total = sizes["snapshot_rows"] + sizes["increment_rows"]
        for name in ("merge", "copy") if fmt == "parquet" else ("merge",):
            out, wall, rss = run_measured([*worker, name], env)
            label = f"{name} ({fmt})" if name == "merge" else name
            measured[label] = out["processing_s"]
            print(
                f"{label:15} wall {wall:7.1f} s  session {out['session_s']:5.1f} s  processing "
                f"{out['processing_s']:7.1f} s  {total / out['processing_s']:>10,.0f} rows/s  peak RSS "
                f"{rss:6.0f} MB  rows out {out['rows_out']:,}  files rewritten {out.get('files_rewritten', '-')}"
            )
    baseline = measured.get("merge (parquet)")
    for label, seconds in measured.items():
        ratios = [f"{seconds / measured['copy']:.2f}x copy"] if "copy" in measured else []
        if baseline:
            ratios.append(f"{seconds / baseline:.2f}x the Parquet merge")
        print(f"{label}: {seconds:.1f} s processing, {', '.join(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
