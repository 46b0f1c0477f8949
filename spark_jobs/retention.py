"""spark-submit entry point of retention: parse args, build the session, call the library.

spark-submit spark_jobs/retention.py --table events --run-id RUN_ID --as-of 2026-11-23T03:30:00+00:00
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tidemark.jobs import job_parser, run_job
from tidemark.retention import run_retention


def _retention(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    return run_retention(
        spark, config, settings, args.run_id, datetime.fromisoformat(args.as_of), dry_run=args.dry_run
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("retention", "Drop the hours of one table past its retention.hours.")
    parser.add_argument("--as-of", required=True, help="the run's data interval end: hours are aged from it")
    return run_job(parser, argv, _retention, hive=True)


if __name__ == "__main__":
    sys.exit(main())
