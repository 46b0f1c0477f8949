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


def _bootstrap(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    from tidemark.bootstrap import BootstrapSource, parse_as_of, preview_bootstrap, run_bootstrap

    source = BootstrapSource(
        kind=args.source_kind,
        location=args.source,
        table=args.source_table,
        query=args.query,
        partition_column=args.partition_column,
        lower_bound=args.lower_bound,
        upper_bound=args.upper_bound,
        num_partitions=args.num_partitions,
    )
    as_of = parse_as_of(args.as_of)
    if args.dry_run:
        return preview_bootstrap(config, settings, source, as_of=as_of, label=args.label)
    return run_bootstrap(spark, config, settings, args.run_id, source, as_of=as_of, label=args.label)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("bootstrap", "Bulk-load a full snapshot of a CDC table, aligned to its topic.")
    parser.add_argument("--source-kind", required=True, choices=("jdbc", "parquet", "csv"))
    parser.add_argument("--source", required=True, help="JDBC URL, or a path of Parquet/CSV files")
    parser.add_argument("--source-table", default="", help="jdbc: the table to read")
    parser.add_argument("--query", default="", help="jdbc: a SELECT to read instead of a table")
    parser.add_argument("--partition-column", default="", help="jdbc: numeric/date column to split reads by")
    parser.add_argument("--lower-bound", default="", help="jdbc: split range start (default: min)")
    parser.add_argument("--upper-bound", default="", help="jdbc: split range end (default: max)")
    parser.add_argument("--num-partitions", type=int, default=4, help="parallel reads / files")
    parser.add_argument(
        "--label", default="", help="snapshot label (default: the as-of time, 2026-11-22T1005)"
    )
    parser.add_argument(
        "--as-of", required=True, help="ISO instant the snapshot stands for (the run's run_after)"
    )
    return run_job(parser, argv, _bootstrap, hive=True)


if __name__ == "__main__":
    sys.exit(main())
