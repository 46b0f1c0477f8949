"""spark-submit entry point of a dirty-record replay: parse args, build the session, call the library.

spark-submit spark_jobs/replay.py --table events --run-id RUN_ID --batches all|3,5 --reason WHY --by WHO --at ISO
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tidemark.ingest.dump import replay_dirty
from tidemark.ingest.replay import ReplayRequest
from tidemark.jobs import job_parser, run_job
from tidemark.time.instants import parse_instant


def _replay(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    at = parse_instant(args.at)
    assert at is not None
    request = ReplayRequest(ReplayRequest.parse_batches(args.batches), by=args.by, reason=args.reason, at=at)
    return replay_dirty(spark, config, settings, args.run_id, request)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("replay", "Classify a table's dirty records again and land those valid now.")
    parser.add_argument("--batches", default="all", help="'all' or the batch ids, e.g. 3,5")
    parser.add_argument("--reason", required=True, help="why: kept in the audit log")
    parser.add_argument("--by", required=True, help="who decided")
    parser.add_argument(
        "--at",
        required=True,
        help="ISO instant of the decision: the replay's clock (decided once, by the caller)",
    )
    return run_job(parser, argv, _replay, hive=False)


if __name__ == "__main__":
    sys.exit(main())
