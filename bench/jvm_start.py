"""A job's Spark session start with and without the drivers' class archive (tidemark.jvm_classes).

    .venv/bin/python bench/jvm_start.py [--runs 3]

Each run is its own process, as a job is: import pyspark, ``build_session`` (local[2], Hive
support), one tiny query, stop. Alternates ``TIDEMARK_JVM_CLASS_ARCHIVE=off`` and the
default archive (``make spark-classes`` first). Prints each run's seconds, the medians and
their ratio. Not a test.
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

from tidemark.settings import Settings

WORKER = """
import time
started = time.perf_counter()
from tidemark.spark import build_session
spark = build_session("tidemark-bench-jvm-start", hive=True)
spark.sql("SELECT 1").collect()
print(time.perf_counter() - started)
spark.stop()
"""


def run(archive: str, home: str) -> float:
    env = {**os.environ, "TIDEMARK_JVM_CLASS_ARCHIVE": archive, "TIDEMARK_HOME": home}
    env.pop("TIDEMARK_JVM_OPTIONS", None)
    done = subprocess.run(
        [sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, check=True, timeout=300
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    archive = Settings.from_env().class_archive
    if archive is None or not archive.is_file():
        print("no class archive: run `make spark-classes` first")
        return 1
    times: dict[str, list[float]] = {"off": [], "archive": []}
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-jvm-") as home:
        for _ in range(args.runs):
            for name, value in (("off", "off"), ("archive", str(archive))):
                started = time.perf_counter()
                seconds = run(value, home)
                times[name].append(seconds)
                print(
                    f"{name:8} session + query {seconds:5.2f} s (process {time.perf_counter() - started:5.2f} s)"
                )
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(json.dumps({k: round(v, 2) for k, v in medians.items()}))
    print(f"ratio archive/off: {medians['archive'] / medians['off']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
