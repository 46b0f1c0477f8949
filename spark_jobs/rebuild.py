"""spark-submit entry point of the hour rebuild: parse args, build the session, call the library.

spark-submit spark_jobs/rebuild.py --table events --run-id RUN_ID --hours 2026-11-22T10,2026-11-22T11
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tidemark.jobs import job_parser, run_job
from tidemark.seal.rebuild import run_rebuild


def _rebuild(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    hours = [h.strip() for h in args.hours.split(",") if h.strip()]
    return run_rebuild(spark, config, settings, args.run_id, hours)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("rebuild", "Rebuild sealed hours of one table from the broker, deterministically.")
    parser.add_argument(
        "--hours", required=True, help="comma-separated hour keys, e.g. 2026-11-22T10,2026-11-22T11"
    )
    return run_job(parser, argv, _rebuild, hive=True)


if __name__ == "__main__":
    sys.exit(main())
