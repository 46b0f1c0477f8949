"""The upgrade path on S3 against the local disk, in one sitting.

    .venv/bin/python bench/upgrade_s3.py [--snapshot-rows 2000000] [--increment-rows 200000]
                                         [--messages 200000] [--partitions 4]

A local S3 server (SeaweedFS, bench/_services.py) and the broker are started for the run.
(1) A Delta snapshot's MERGE (bench/upsert.py's workers, each in its own process): the same
    snapshot (files of 1M rows) and changes, the Delta table on the local disk and on S3,
    with tidemark's delta-rs settings (on S3 every commit a conditional PUT).
(2) The stream's micro-batches (bench/stream.py's throughput run): the same backlog drained
    by ``spark_jobs/stream.py --until-caught-up`` in micro-batches capped at a quarter of
    each MQ partition, with the warehouse, the state and the query's checkpoint on the local
    disk, then on S3. Per micro-batch: the dump's seconds (read to commit record) and the
    micro-batch's wall seconds (the query's own, checkpoint writes included).

Prints each figure and the s3/local ratios last. Not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _services import start_local_s3
from dump_throughput import PROCESSING, produce_input, run_measured
from stream import environment, job, switch_to_stream, table_yaml

from tidemark.settings import Settings
from tidemark_dev.services import TansuService

BUCKET = "bench"


def delta_merge(args: argparse.Namespace, scratch: Path, s3_env: dict[str, str]) -> dict[str, float]:
    upsert = str(Path(__file__).resolve().parent / "upsert.py")
    seconds = {}
    for store in ("local", "s3"):
        root = scratch / f"upsert-{store}"
        snapshot = f"s3://{BUCKET}/upsert-{uuid.uuid4().hex[:8]}/snapshot" if store == "s3" else ""
        env = {**os.environ, **(s3_env if store == "s3" else {})}
        sizes = ["--snapshot-rows", str(args.snapshot_rows), "--increment-rows", str(args.increment_rows)]
        common = ["--root", str(root), "--snapshot-uri", snapshot, *sizes]
        run_measured([sys.executable, upsert, "--worker", "prepare", *common], env)
        merged, wall, rss = run_measured([sys.executable, upsert, "--worker", "merge", *common], env)
        seconds[store] = merged["seconds"]
        print(
            f"  {store:<6} MERGE {merged['seconds']:6.2f} s (wall {wall:5.1f} s, peak RSS {rss:5.0f} MB); "
            f"files {merged['files_before']} before, {merged['files_rewritten']} rewritten; "
            f"rows out {merged['rows_out']:,}",
            flush=True,
        )
    return seconds


def stream_batches(
    args: argparse.Namespace, bootstrap: str, scratch: Path, s3_env: dict[str, str]
) -> dict[str, Any]:
    topic = f"bench_{uuid.uuid4().hex[:8]}"
    ends, _ = produce_input(bootstrap, topic, args.messages, args.partitions)
    total = sum(ends.values())
    figures = {}
    for store in ("local", "s3"):
        home = scratch / f"stream-{store}"
        location = {}
        if store == "s3":
            prefix = f"s3://{BUCKET}/stream-{uuid.uuid4().hex[:8]}"
            location = {
                **s3_env,
                "TIDEMARK_WAREHOUSE": f"{prefix}/warehouse",
                "TIDEMARK_STATE_DIR": f"{prefix}/state",
            }
        table_yaml(  # a commit delay of 2 h: no hour seals during the run, the stream only ingests
            home / "conf",
            "bench",
            topic,
            source__max_records_per_partition=max(ends.values()) // 4 + 1,
            watermark__commit_delay="2h",
        )
        switch_to_stream(home, bootstrap, "bench", location)
        command = job(
            "bench", "stream", "bench-s", "--until-caught-up", "--trigger-interval", "1s",
            "--clock-from", PROCESSING.isoformat(),
        )  # fmt: skip
        out, wall, rss = run_measured(command, environment(home, bootstrap, location))
        assert out["records"] == total, (store, out["records"], total)
        figures[store] = {
            "batches": out["batches"],
            "dump_per_batch": out["dump_s"] / out["batches"],
            "processing": wall - out["session_start_s"],
        }
        f = figures[store]
        print(
            f"  {store:<6} {total:,} records in {f['batches']} micro-batches: dump {f['dump_per_batch']:5.2f} s "
            f"per micro-batch; wall less session start {f['processing']:6.1f} s "
            f"({total / f['processing']:,.0f} rec/s); peak RSS {rss:5.0f} MB",
            flush=True,
        )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot-rows", type=int, default=2_000_000)
    parser.add_argument("--increment-rows", type=int, default=200_000)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    broker = TansuService(settings)
    started_here = not broker.status().running
    broker.start()
    scratch = Path(tempfile.mkdtemp(prefix="tidemark-bench-upgrade-s3-"))
    port = int(os.environ.get("BENCH_S3_PORT", "18600"))
    s3, s3_env = start_local_s3(settings, scratch / "s3-service", port, BUCKET)
    try:
        print("(1) Delta MERGE of one increment", flush=True)
        merge = delta_merge(args, scratch, s3_env)
        print("(2) the stream's micro-batches", flush=True)
        batches = stream_batches(args, settings.kafka_bootstrap, scratch, s3_env)
    finally:
        s3.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        if started_here:
            broker.stop()
    print(f"delta merge s3/local = {merge['s3'] / merge['local']:.2f}")
    ratio = batches["s3"]["dump_per_batch"] / batches["local"]["dump_per_batch"]
    print(f"stream micro-batch dump s3/local = {ratio:.2f}")
    print(f"stream processing s3/local = {batches['s3']['processing'] / batches['local']['processing']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
