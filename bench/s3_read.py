"""Spark reading table files on S3: the pyarrow.fs data source against Spark's own reader.

    .venv/bin/python bench/s3_read.py [--rows 4000000] [--files 8]

The pyspark wheel has no hadoop-aws, so Spark cannot read ``s3a://`` here; tidemark's jobs read
table files through ``tidemark.tablefs`` (a Spark Python data source over ``pyarrow.fs``). In
a scratch TIDEMARK_HOME it starts SeaweedFS (``tidemark-dev services start s3``), writes N rows of
events-like columns as F Parquet files to local disk and to ``s3://bench``, then, in one Spark
session (local[2]), times a full scan that touches every column (count + sums + a string
length) three ways, best of three each:

(a) Spark's own Parquet reader on the local files: the floor;
(b) the pyarrow.fs data source on the local files: the cost of the Python data source itself;
(c) the pyarrow.fs data source on S3 (SeaweedFS on this machine): (b) plus the object store.

Prints seconds, rows/s and the ratios b/a and c/a. Not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from tidemark.settings import Settings
from tidemark.spark import build_session
from tidemark.tablefs import filesystem, parquet_files
from tidemark_dev.net import free_port_block
from tidemark_dev.s3 import PORTS, S3Service, s3_environment

ROOT = Path(__file__).resolve().parents[1]
DDL = "event_id string, user_id bigint, app string, amount decimal(12,2), _mq_offset bigint"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--files", type=int, default=8)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-s3-"))
    os.environ["TIDEMARK_HOME"] = str(home)
    import boto3
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from tidemark.sparkfiles import read_files

    sys.path.insert(0, str(ROOT))

    settings = replace(Settings.from_env(), s3_port=free_port_block(PORTS))
    service = S3Service(settings)
    service.start()
    os.environ.update(s3_environment(settings))
    try:
        boto3.client("s3").create_bucket(Bucket="bench")
        per_file = args.rows // args.files
        ids = np.arange(per_file, dtype=np.int64)
        local = home / "local"
        local.mkdir()
        for i in range(args.files):
            table = pa.table(
                {
                    "event_id": pa.array([f"e-{i}-{n}" for n in range(per_file)]),
                    "user_id": ids + i * per_file,
                    "app": pa.array(np.array(["web", "ios", "android"])[ids % 3]),
                    "amount": pa.array((ids % 100_000).astype(np.int32)).cast(pa.decimal128(12, 2)),
                    "_mq_offset": ids,
                }
            )
            pq.write_table(table, local / f"part-{i:05d}.parquet")
            fs, path = filesystem(f"s3://bench/events/part-{i:05d}.parquet")
            with fs.open_output_stream(path) as out:
                pq.write_table(table, out)
        spark = build_session("tidemark-bench-s3", settings, hive=False)

        def scan(frame: object) -> tuple[float, int]:
            best, rows = float("inf"), 0
            for _ in range(3):
                started = time.perf_counter()
                row = frame.agg(  # type: ignore[attr-defined]
                    F.count("*"),
                    F.sum("user_id"),
                    F.sum("amount"),
                    F.sum(F.length("event_id")),
                    F.sum("_mq_offset"),
                ).collect()[0]
                best, rows = min(best, time.perf_counter() - started), int(row[0])
            return best, rows

        spark_local = scan(spark.read.schema(DDL).parquet(str(local)))
        source_local = scan(read_files(spark, parquet_files(str(local)), DDL))
        s3_files = parquet_files("s3://bench/events")
        assert len(s3_files) == args.files, s3_files
        source_s3 = scan(read_files(spark, s3_files, DDL))
        spark.stop()
    finally:
        service.stop()
        shutil.rmtree(home, ignore_errors=True)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, python {platform.python_version()}")
    print(f"N = {args.rows:,} rows in {args.files} files; full scan of every column, best of 3")
    for label, (seconds, rows) in (
        ("(a) Spark reader, local", spark_local),
        ("(b) pyarrow.fs source, local", source_local),
        ("(c) pyarrow.fs source, S3", source_s3),
    ):
        assert rows == per_file * args.files, (label, rows)
        print(f"{label:30} {seconds:6.2f} s  {rows / seconds:12,.0f} rows/s")
    print(f"b/a = {source_local[0] / spark_local[0]:.2f}; c/a = {source_s3[0] / spark_local[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
