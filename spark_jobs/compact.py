"""spark-submit entry point of re-compaction: parse args, build the session, call the library.

spark-submit spark_jobs/compact.py --table events --run-id RUN_ID [--dry-run true]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tidemark.jobs import job_parser, run_job
from tidemark.snapshot.compaction import run_table_compaction


def _compact(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    return run_table_compaction(spark, config, settings, args.run_id, dry_run=args.dry_run)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser(
        "compact",
        "Merge back the small files of the table's amended hours and of its Delta or Iceberg snapshot.",
    )
    return run_job(parser, argv, _compact, hive=True)


if __name__ == "__main__":
    sys.exit(main())
