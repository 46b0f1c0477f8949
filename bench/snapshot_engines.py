"""The snapshot MERGE on Spark (delta-spark, Iceberg) against delta-rs in one process, same data.

    .venv/bin/python bench/snapshot_engines.py [--snapshot-rows 10000000] [--increment-rows 1000000]
        [--engines delta-rs,delta-spark-local,delta-spark-cluster,iceberg-spark-local] [--runs 1]

Issue 46 asks where each engine wins for ``cdc.snapshot_format: delta``: today's MERGE runs
in one process (delta-rs, ``tidemark.snapshot.delta``); delta-spark would run it on the
cluster's executors. The data and the MERGE are ``bench/upsert.py``'s: a Delta snapshot of N
orders written by delta-rs in files of 1M rows, M change rows (60% updates, 30% inserts, 10%
deletes, 5% sent twice), deduplicated to the newest change per key, then one MERGE (delete /
update when newer / insert). Each run starts from a fresh copy of the prepared table, and
each engine runs in its own process:

- ``delta-rs``: ``bench/upsert.py``'s merge worker (deltalake, one process);
- ``delta-spark-local``: Spark SQL's ``MERGE INTO delta.`<path>``` with delta-spark
  (``jvm/pom.xml``'s ``delta`` profile) on ``local[*]``, tidemark's session defaults;
- ``delta-spark-cluster``: the same on the standalone cluster of ``tidemark_dev.cluster`` (a
  master and two one-core workers, 2 GB each), started once for the bench;
- ``iceberg-spark-local``: ``cdc.snapshot_format: iceberg``'s MERGE: the same rows copied
  (not timed) into an Iceberg table (format 2, Iceberg's default copy-on-write MERGE, files
  of ~1M rows in key order, as tidemark's bootstrap writes them), then Spark SQL's
  ``MERGE INTO`` with Iceberg's runtime and SQL extensions on ``local[*]``;
- ``iceberg-v3-mor-local``: the same on a format-3 table whose MERGE is merge-on-read
  (``cdc.iceberg_format_version: 3``, ``cdc.merge_mode: merge-on-read``): deletion vectors
  beside the files a change touches instead of rewriting them.

Prints per run the wall time of the whole process (the JVM start included), the MERGE alone,
the CPU seconds and peak RSS of the process tree plus, on the cluster, of its executors
(sampled from /proc every 0.2 s), and the rows and files the MERGE reports; then the ratios
``<engine>/delta-rs`` in wall time (Iceberg's: less its untimed copy; its CPU and RSS
include the copy), and ``mor/cow`` for the MERGE and for a full read of the table after it
(every column of every row, the deletes applied). Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump_throughput import last_json, run_tree
from upsert import APP_ID

from tidemark.jvm_jars import require_jars
from tidemark.settings import Settings
from tidemark.spark import build_session
from tidemark_dev.cluster import SparkMasterService, SparkWorkerService, master_url
from tidemark_dev.net import free_port_block

ENGINES = (
    "delta-rs",
    "delta-spark-local",
    "delta-spark-cluster",
    "iceberg-spark-local",
    "iceberg-v3-mor-local",
)
# cdc.iceberg_format_version: 3 with cdc.merge_mode: merge-on-read: the MERGE writes deletion
# vectors beside the files it touches instead of rewriting them (tidemark.snapshot.iceberg_snapshot)
MERGE_ON_READ = {
    "format-version": "3",
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
}
COLUMNS = ("order_id", "version", "customer_id", "status", "amount")


def merge_statement(target: str) -> str:
    """The bench's MERGE of the deduplicated changes (the ``changes`` view) into ``target``:
    delete / update when newer / insert, as tidemark's."""
    updates = ", ".join(f"{c} = s.{c}" for c in COLUMNS[1:])
    return f"""
        MERGE INTO {target} t USING changes s ON t.order_id = s.order_id
        WHEN MATCHED AND s.op = 'd' THEN DELETE
        WHEN MATCHED AND s.op <> 'd' AND s.version > t.version THEN UPDATE SET {updates}
        WHEN NOT MATCHED AND s.op <> 'd' THEN INSERT ({", ".join(COLUMNS)}) VALUES ({", ".join(f"s.{c}" for c in COLUMNS)})
    """


# -- the delta-spark worker (its own process) --------------------------------------------------
def spark_merge(root: Path) -> dict[str, Any]:
    """One MERGE INTO of the deduplicated changes, idempotent by Delta's app transaction."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    jars = require_jars("delta")
    conf = {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }
    started = time.perf_counter()
    spark = build_session("bench-delta-spark", Settings.from_env(), hive=False, extra_conf=conf)
    session_s = time.perf_counter() - started
    uri = str(root / "snapshot")
    history = f"DESCRIBE HISTORY delta.`{uri}`"
    version_before = spark.sql(history).agg(F.max("version")).first()[0]
    changes = spark.read.parquet(str(root / "changes.parquet")).withColumn(
        "_arrival", F.monotonically_increasing_id()
    )
    newest = Window.partitionBy("order_id").orderBy(F.col("version").desc(), F.col("_arrival").desc())
    latest = changes.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n", "_arrival")
    latest.createOrReplaceTempView("changes")
    merge_sql = merge_statement(f"delta.`{uri}`")
    # Delta's idempotent writes: a second MERGE with the same (app id, version) is skipped
    spark.conf.set("spark.databricks.delta.write.txnAppId", APP_ID)
    spark.conf.set("spark.databricks.delta.write.txnVersion", "1")
    # where tidemark's delta-rs commits carry the snapshot record (commitInfo)
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", json.dumps({"tidemark.record": "bench"}))
    merge_started = time.perf_counter()
    metrics = spark.sql(merge_sql).first().asDict()
    merge_s = time.perf_counter() - merge_started
    version_after = spark.sql(history).agg(F.max("version")).first()[0]
    spark.sql(merge_sql).collect()  # the retry
    version_retried = spark.sql(history).agg(F.max("version")).first()[0]
    operation = spark.sql(f"{history} LIMIT 1").first()
    rows = spark.read.format("delta").load(uri).count()
    return {
        "delta_rs_reads": _delta_rs_view(uri),
        "session_s": session_s,
        "seconds": merge_s,
        "rows_out": rows,
        "retry_would_skip": version_retried == version_after > version_before,
        "metrics": {
            **metrics,
            **{
                k: operation.operationMetrics.get(k) for k in ("numTargetFilesRemoved", "numTargetFilesAdded")
            },
        },
        "master": spark.sparkContext.master,
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
    }


def iceberg_merge(root: Path, properties: dict[str, str] | None = None) -> dict[str, Any]:
    """The same MERGE INTO on an Iceberg copy of the snapshot (a Hadoop catalog in ``root``),
    format 2 and copy-on-write unless ``properties`` say otherwise; then one full read of the
    merged table (every column of every row: deletes applied), timed too."""
    from deltalake import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    conf = {
        "spark.jars": ",".join(require_jars("iceberg")),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.catalog.bench": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.bench.type": "hadoop",
        "spark.sql.catalog.bench.warehouse": str(root / "iceberg"),
    }
    started = time.perf_counter()
    spark = build_session("bench-iceberg-spark", Settings.from_env(), hive=False, extra_conf=conf)
    session_s = time.perf_counter() - started
    files = DeltaTable(str(root / "snapshot")).file_uris()
    snapshot = spark.read.parquet(*files).select(*COLUMNS)
    copy_started = time.perf_counter()
    rows_in = snapshot.count()
    writer = (
        snapshot.repartitionByRange(max(1, rows_in // 1_000_000), "order_id")
        .sortWithinPartitions("order_id")
        .writeTo("bench.db.snapshot")
    )
    for key, value in (properties or {"format-version": "2"}).items():
        writer = writer.tableProperty(key, value)
    writer.create()
    copy_s = time.perf_counter() - copy_started
    # Iceberg's MERGE refuses a non-deterministic source (the arrival id above): the newest
    # change per key by version, a key's repeated change being the same row
    changes = spark.read.parquet(str(root / "changes.parquet")).dropDuplicates()
    newest = Window.partitionBy("order_id").orderBy(F.col("version").desc(), F.col("op"))
    latest = changes.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n")
    latest.createOrReplaceTempView("changes")
    spark.conf.set("spark.sql.iceberg.snapshot-property.tidemark.record", "bench")  # as tidemark's commits
    merge_started = time.perf_counter()
    spark.sql(merge_statement("bench.db.snapshot")).collect()
    merge_s = time.perf_counter() - merge_started
    read_started = time.perf_counter()
    spark.table("bench.db.snapshot").write.format("noop").mode("overwrite").save()
    read_s = time.perf_counter() - read_started
    summary = spark.sql("SELECT summary FROM bench.db.snapshot.snapshots ORDER BY committed_at DESC LIMIT 1")
    counts = summary.first()[0]
    keys = (
        "spark.merge-into.num-target-rows-inserted",
        "spark.merge-into.num-target-rows-updated",
        "spark.merge-into.num-target-rows-deleted",
        "deleted-data-files",
        "added-data-files",
        "added-dvs",
        "added-delete-files",
    )
    return {
        "session_s": session_s,
        "copy_s": copy_s,
        "seconds": merge_s,
        "read_s": read_s,
        "rows_out": spark.table("bench.db.snapshot").count(),
        "retry_would_skip": "n/a (tidemark checks the snapshot summary)",
        "metrics": {k.rsplit(".", 1)[-1]: counts.get(k) for k in keys},
        "master": spark.sparkContext.master,
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
    }


def _delta_rs_view(uri: str) -> dict[str, Any]:
    """What tidemark's delta-rs side (recovery, VACUUM, the reads) sees of a delta-spark commit."""
    from deltalake import DeltaTable

    table = DeltaTable(uri)
    last = table.history(1)[0]
    return {
        "transaction_version": table.transaction_version(APP_ID),
        "user_metadata": last.get("userMetadata"),
        "reader_features": table.protocol().reader_features,
        "writer_features": table.protocol().writer_features,
        "min_reader": table.protocol().min_reader_version,
        "min_writer": table.protocol().min_writer_version,
    }


# -- the driver --------------------------------------------------------------------------------
class ExecutorSampler:
    """CPU seconds and peak RSS of the cluster's executors (children of the worker daemons,
    outside the driver's process tree)."""

    def __init__(self) -> None:
        self.cpu: dict[tuple[int, float], float] = {}
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            rss = 0
            for p in psutil.process_iter(["cmdline"]):
                with contextlib.suppress(psutil.Error):
                    if "CoarseGrainedExecutorBackend" in " ".join(p.info["cmdline"] or []):
                        times = p.cpu_times()
                        self.cpu[(p.pid, p.create_time())] = times.user + times.system
                        rss += p.memory_info().rss
            self.peak = max(self.peak, rss)
            time.sleep(0.2)

    def __enter__(self) -> ExecutorSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot-rows", type=int, default=10_000_000)
    parser.add_argument("--increment-rows", type=int, default=1_000_000)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--worker", choices=("spark-merge", "iceberg-merge", "iceberg-mor-merge"), help=argparse.SUPPRESS
    )
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        workers = {
            "spark-merge": spark_merge,
            "iceberg-merge": iceberg_merge,
            "iceberg-mor-merge": lambda root: iceberg_merge(root, MERGE_ON_READ),
        }
        print(json.dumps(workers[args.worker](args.root), default=str))
        return 0
    engines = [e for e in args.engines.split(",") if e]
    if unknown := set(engines) - set(ENGINES):
        parser.error(f"unknown engines {sorted(unknown)}")

    scratch = Path(tempfile.mkdtemp(prefix="tidemark-bench-engines-"))
    settings = replace(Settings.from_env(), home=scratch / "home", spark_port=free_port_block(6))
    nodes = [SparkMasterService(settings), *(SparkWorkerService(settings, i) for i in (1, 2))]
    env = {**os.environ, "TIDEMARK_HOME": str(settings.home)}
    upsert = str(Path(__file__).resolve().parent / "upsert.py")
    results: dict[str, list[dict[str, Any]]] = {e: [] for e in engines}
    try:
        prepared = scratch / "prepared"
        sizes = ["--snapshot-rows", str(args.snapshot_rows), "--increment-rows", str(args.increment_rows)]
        run_tree([sys.executable, upsert, "--worker", "prepare", "--root", str(prepared), *sizes], env)
        print(
            f"prepared N = {args.snapshot_rows:,} snapshot rows (delta-rs), M = {args.increment_rows:,} changes",
            flush=True,
        )
        if "delta-spark-cluster" not in engines:
            nodes = []
        for node in nodes:
            node.start()
        for i in range(args.runs):
            for engine in engines if i % 2 == 0 else reversed(engines):
                root = scratch / f"{engine}-{i}"
                shutil.copytree(prepared, root)
                if engine == "delta-rs":
                    command = [sys.executable, upsert, "--worker", "merge", "--root", str(root)]
                    run_env = env
                else:
                    kind = {
                        "iceberg-spark-local": "iceberg-merge",
                        "iceberg-v3-mor-local": "iceberg-mor-merge",
                    }.get(engine, "spark-merge")
                    command = [sys.executable, __file__, "--worker", kind, "--root", str(root)]
                    master = master_url(settings) if engine == "delta-spark-cluster" else "local[*]"
                    run_env = {**env, "TIDEMARK_SPARK_MASTER": master}
                with ExecutorSampler() as executors:
                    out, wall, cpu, rss = run_tree(command, run_env)
                result = last_json(out)
                wall -= float(result.get("copy_s", 0.0))  # Iceberg's copy of the snapshot is not the MERGE
                cpu += sum(executors.cpu.values())
                rss += executors.peak / 1e6
                result.update(engine=engine, wall=wall, cpu=cpu, rss=rss)
                results[engine].append(result)
                print(
                    f"{engine:20} wall {wall:6.1f} s, MERGE {result['seconds']:6.1f} s, {cpu:6.1f} CPU-s, "
                    f"peak RSS {rss:,.0f} MB (executors included), rows out {result['rows_out']:,}, "
                    f"full read after {result.get('read_s', float('nan')):.1f} s, "
                    f"retry skipped: {result['retry_would_skip']}; {result.get('metrics')}; "
                    f"delta-rs sees {result.get('delta_rs_reads', '-')}",
                    flush=True,
                )
                shutil.rmtree(root, ignore_errors=True)
    finally:
        for node in reversed(nodes):
            node.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    cow, mor = results.get("iceberg-spark-local"), results.get("iceberg-v3-mor-local")
    if cow and mor:  # Iceberg v3 merge-on-read (deletion vectors) against v2 copy-on-write
        merges = [m["seconds"] / c["seconds"] for m, c in zip(mor, cow, strict=True)]
        reads = [m["read_s"] / c["read_s"] for m, c in zip(mor, cow, strict=True)]
        print(
            f"mor/cow = {statistics.median(merges):.2f} (MERGE; runs {', '.join(f'{r:.2f}' for r in merges)})"
        )
        print(
            f"mor/cow = {statistics.median(reads):.2f} (full read after it; runs {', '.join(f'{r:.2f}' for r in reads)})"
        )
    base = results.get("delta-rs")
    for engine in engines:
        if engine != "delta-rs" and base and results[engine]:
            walls = [r["wall"] / b["wall"] for r, b in zip(results[engine], base, strict=True)]
            merges = [r["seconds"] / b["seconds"] for r, b in zip(results[engine], base, strict=True)]
            print(
                f"{engine}/delta-rs = {statistics.median(walls):.2f} in wall time "
                f"(MERGE alone {statistics.median(merges):.2f}; runs {', '.join(f'{w:.2f}' for w in walls)})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
