"""spark-submit entry point of the continuous writer: parse args, build the session, call the
library.

spark-submit spark_jobs/stream.py --table events --run-id RUN_ID [--until-caught-up] [--trigger-interval 10s]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tidemark.durations import parse_duration
from tidemark.jobs import job_parser, run_job
from tidemark.stream.runner import run_stream
from tidemark.time.clocks import stream_clock


def _stream(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    interval = parse_duration(args.trigger_interval).total_seconds() if args.trigger_interval else None
    return run_stream(
        spark,
        config,
        settings,
        args.run_id,
        clock=stream_clock(args.clock_from),
        until_caught_up=args.until_caught_up,
        trigger_interval_s=interval,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("stream", "The table's continuous writer (tidemark switch --to stream first).")
    parser.add_argument(
        "--until-caught-up",
        action="store_true",
        help="stop once everything the broker had at the start is committed (and its hours sealed)",
    )
    parser.add_argument("--trigger-interval", default="", help="override stream.trigger_interval (e.g. 5s)")
    parser.add_argument(
        "--clock-from",
        default="",
        help="ISO instant the stream's processing time starts from (then runs with the wall clock); "
        "default: the wall clock. For replayed timelines (the demo), never for production",
    )
    return run_job(parser, argv, _stream, hive=True)


if __name__ == "__main__":
    sys.exit(main())
