"""spark-submit entry point of the lake check: parse args, build the session, call the library.

spark-submit spark_jobs/verify.py --table events --run-id RUN_ID --as-of 2026-11-23T03:30:00+00:00
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tidemark.jobs import job_parser, run_job
from tidemark.observe.verify import run_verify


def _verify(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    return run_verify(spark, config, settings, datetime.fromisoformat(args.as_of))


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("verify", "Check one table as readers see it against its commit log.")
    parser.add_argument("--as-of", required=True, help="the instant orphans are judged at (the run's time)")
    return run_job(parser, argv, _verify, hive=True)


if __name__ == "__main__":
    sys.exit(main())
