"""spark-submit entry point of sealing: parse args, call the library with a session that
starts on first use (``tidemark.lazy_session``: a seal of small hours over a metastore service
needs no Spark).

spark-submit spark_jobs/seal.py --table events --run-id RUN_ID
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tidemark.jobs import job_parser, run_job
from tidemark.seal.sealing import preview_seal, run_release, run_seal


def _seal(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    if args.dry_run:
        return preview_seal(config, settings)
    for hour in [h.strip() for h in (args.release or "").split(",") if h.strip()]:
        run_release(spark, config, settings, hour, args.run_id)
    return run_seal(spark, config, settings, args.run_id)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("seal", "Seal, register and amend the complete hours of one table.")
    parser.add_argument(
        "--release",
        default="",
        help="comma-separated quarantined hours to register first (after a person checked them)",
    )
    return run_job(parser, argv, _seal, hive=True, lazy=True)  # Spark only where the seal needs it


if __name__ == "__main__":
    sys.exit(main())
