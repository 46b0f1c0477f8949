"""spark-submit entry point of the micro-batch dump: parse args, build the session, call the library.

spark-submit spark_jobs/dump.py --table events --run-id RUN_ID [--processing-time ISO]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tidemark.ingest.dump import replay_dirty, run_dump
from tidemark.ingest.kafka import client_properties
from tidemark.ingest.planner import preview_batch
from tidemark.ingest.replay import ReplayRequest
from tidemark.ingest.resolve import ACTIONS, resolve
from tidemark.jobs import job_parser, run_job
from tidemark.table import Table
from tidemark.time.instants import parse_instant


def _dump(spark: Any, config: Any, settings: Any, args: argparse.Namespace) -> Any:
    if args.dry_run:
        conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
        return preview_batch(config, Table.read(config, settings).state.commit_log, conf)
    started = datetime.now(UTC)  # the wall clock, read once here: a new plan records it
    if args.resolve:  # the trigger form's decision about a stuck batch, applied once per run
        resolve(
            config,
            settings,
            action=args.resolve,
            reason=args.resolve_reason,
            by=args.resolved_by,
            at=started,
            run_id=args.run_id,
        )
    processing_time = parse_instant(args.processing_time) or started
    result = run_dump(spark, config, settings, args.run_id, processing_time, planned_at=started)
    if args.replay_dirty:  # the trigger form's replay, after this run's own batch (once per run)
        request = ReplayRequest(
            ReplayRequest.parse_batches(args.replay_dirty),
            by=args.resolved_by,
            reason=args.resolve_reason,
            at=started,
        )
        replayed = replay_dirty(spark, config, settings, f"{args.run_id}__replay", request)
        return {**result.to_json(), "replay": replayed.to_json()}
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("dump", "Exactly-once micro-batch dump of one table.")
    parser.add_argument(
        "--processing-time",
        help="ISO timestamp of the run (Airflow: {{ data_interval_end }}); recorded in the plan, so a "
        "retry judges future event times the same way. Default: now, for a first attempt only.",
    )
    parser.add_argument(
        "--resolve",
        default="",
        choices=["", *ACTIONS],
        help="first record this decision about the pending batch (tidemark resolve)",
    )
    parser.add_argument(
        "--replay-dirty",
        default="",
        help="then replay these batches' dirty records ('all' or 3,5; tidemark replay), as batch of run RUN_ID__replay",
    )
    parser.add_argument(
        "--resolve-reason", default="", help="why (a decision or a replay): kept in the audit log"
    )
    parser.add_argument("--resolved-by", default="airflow", help="who decided")
    return run_job(parser, argv, _dump, hive=False, lazy=True)  # no Spark for a local master's read


if __name__ == "__main__":
    sys.exit(main())
