"""spark-submit entry point of the bootstrap: parse args, build the session, call the library.

spark-submit spark_jobs/bootstrap.py --table orders --run-id RUN_ID --source-kind jdbc \
    --source jdbc:postgresql://db:5432/shop --source-table orders --partition-column order_id

Credentials come from TIDEMARK_SOURCE_USER / TIDEMARK_SOURCE_PASSWORD (the Airflow task fills
them from a connection), never from arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tidemark.jobs import job_parser, run_job
from tidemark.snapshot.bootstrap import parse_as_of, preview_bootstrap, run_bootstrap
from tidemark.snapshot.sources import add_source_arguments, source_from_arguments


def _bootstrap(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    source = source_from_arguments(args)
    as_of = parse_as_of(args.as_of)
    if args.dry_run:
        return preview_bootstrap(config, settings, source, as_of=as_of, label=args.label)
    return run_bootstrap(spark, config, settings, args.run_id, source, as_of=as_of, label=args.label)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("bootstrap", "Bulk-load a full snapshot of a CDC table, aligned to its topic.")
    add_source_arguments(parser)
    parser.add_argument(
        "--label", default="", help="snapshot label (default: the as-of time, 2026-11-22T1005)"
    )
    parser.add_argument(
        "--as-of", required=True, help="ISO instant the snapshot stands for (the run's run_after)"
    )
    return run_job(parser, argv, _bootstrap, hive=True)


if __name__ == "__main__":
    sys.exit(main())
