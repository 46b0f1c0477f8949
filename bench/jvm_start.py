"""A job's Spark session start with and without the drivers' class archive of its class path
(tidemark.jvm_classes), for each variant whose jars are fetched: the local warehouse's, an S3
warehouse's (s3a on the class path) and an Iceberg table's jobs' (Iceberg's runtime on it).

    .venv/bin/python bench/jvm_start.py [--runs 3] [--variants local,iceberg]

Each run is its own process, as a job is: import pyspark, ``build_session`` (local[2], Hive
support, the variant's driver class path), one tiny query, stop. Alternates
``TIDEMARK_JVM_CLASS_ARCHIVE=off`` and the default archives (``make spark-classes`` first).
Prints each run's seconds, the medians and their ratio per variant. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from tidemark.jvm_classes import fetched, variant
from tidemark.settings import Settings
from tidemark.spark import class_archive

WORKER = """
import json, sys, time
started = time.perf_counter()
from tidemark.spark import build_session
class_path = sys.argv[1]
conf = {"spark.driver.extraClassPath": class_path} if class_path else None
spark = build_session("tidemark-bench-jvm-start", hive=True, extra_conf=conf)
spark.sql("SELECT 1").collect()
print(time.perf_counter() - started)
spark.stop()
"""


def run(archive: str, home: str, warehouse: str, class_path: str) -> float:
    env = {**os.environ, "TIDEMARK_JVM_CLASS_ARCHIVE": archive, "TIDEMARK_HOME": home}
    env["TIDEMARK_WAREHOUSE"] = warehouse
    env.pop("TIDEMARK_JVM_OPTIONS", None)
    done = subprocess.run(
        [sys.executable, "-c", WORKER, class_path],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variants", default="", help="comma-separated (default: every fetched one)")
    args = parser.parse_args()
    settings = Settings.from_env()
    names = [n for n in args.variants.split(",") if n] or fetched(settings)
    for name in names:
        own, class_path = variant(settings, name)
        archive = class_archive(own, class_path)
        if archive is None or not archive.is_file():
            print(f"{name}: no class archive: run `make spark-classes` first")
            return 1
        times: dict[str, list[float]] = {"off": [], "archive": []}
        with tempfile.TemporaryDirectory(prefix="tidemark-bench-jvm-") as home:
            warehouse = own.warehouse if own.warehouse.startswith("s3") else f"{home}/warehouse"
            for _ in range(args.runs):
                for mode, value in (("off", "off"), ("archive", "")):
                    started = time.perf_counter()
                    seconds = run(value, home, warehouse, class_path or "")
                    times[mode].append(seconds)
                    print(
                        f"{name:8} {mode:8} session + query {seconds:5.2f} s "
                        f"(process {time.perf_counter() - started:5.2f} s)"
                    )
        medians = {mode: statistics.median(values) for mode, values in times.items()}
        print(json.dumps({"variant": name, **{k: round(v, 2) for k, v in medians.items()}}))
        print(f"{name}: ratio archive/off: {medians['archive'] / medians['off']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
