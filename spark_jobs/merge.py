"""spark-submit entry point of the snapshot merge: parse args, build the session, call the library.

spark-submit spark_jobs/merge.py --table orders --snapshot 2026-11-22 --run-id RUN_ID
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tidemark.jobs import job_parser, run_job
from tidemark.snapshot.merge import run_merge
from tidemark.snapshot.merge_plan import preview_merge


def _merge(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    if args.dry_run:
        return preview_merge(config, settings, args.snapshot)
    return run_merge(spark, config, settings, args.run_id, args.snapshot)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("merge", "Merge sealed increment hours into the snapshot of a period.")
    parser.add_argument(
        "--snapshot", required=True, help="the period: a day (2026-11-22) or an hour (2026-11-22T13)"
    )
    return run_job(parser, argv, _merge, hive=True)


if __name__ == "__main__":
    sys.exit(main())
