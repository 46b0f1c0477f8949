"""spark-submit entry point of the micro-batch dump: parse args, build the session, call the library.

spark-submit spark_jobs/dump.py --table events --run-id RUN_ID [--processing-time ISO]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dump", description="Exactly-once micro-batch dump of one table.")
    parser.add_argument("--table", required=True, help="table name (conf/tables/<name>.yaml)")
    parser.add_argument("--run-id", required=True, help="Airflow run id: the batch's idempotency key")
    parser.add_argument(
        "--processing-time",
        help="ISO timestamp of the run (Airflow: {{ data_interval_end }}); recorded in the plan, so a "
        "retry judges future event times the same way. Default: now, for a first attempt only.",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from tidemark.config import load_table
    from tidemark.dump import run_dump
    from tidemark.settings import Settings
    from tidemark.spark import build_session

    settings = Settings.from_env()
    config = load_table(args.table, settings)
    processing_time = (
        datetime.fromisoformat(args.processing_time) if args.processing_time else datetime.now(UTC)
    )
    if processing_time.tzinfo is None:
        processing_time = processing_time.replace(tzinfo=UTC)
    started = time.perf_counter()
    spark = build_session(f"tidemark-dump-{config.table}", settings, hive=False)
    session_start = time.perf_counter() - started
    try:
        result = run_dump(spark, config, settings, args.run_id, processing_time)
    finally:
        spark.stop()
    print(json.dumps({**result.to_json(), "session_start_s": round(session_start, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
