"""spark-submit entry point of a group's job: parse args, build one session, run the job for
every table of the group (tidemark.group.runner).

spark-submit spark_jobs/group.py --group clicks --job dump --run-id RUN_ID [--tables a,b]
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tidemark.group.members import group_members, select_members
from tidemark.group.runner import DEFAULT_PARALLELISM, GROUP_JOBS, GroupRun, run_group
from tidemark.jobs import in_session, tables_session_conf
from tidemark.settings import Settings
from tidemark.stream.group import run_group_streams
from tidemark.time.clocks import stream_clock
from tidemark.time.instants import parse_instant


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="group", description="One job for every table of a group.")
    parser.add_argument("--group", required=True, help="the group's name (group: in the table YAMLs)")
    parser.add_argument("--job", required=True, choices=[*GROUP_JOBS, "stream"])
    parser.add_argument("--run-id", required=True, help="Airflow run id: every table's idempotency key")
    parser.add_argument("--processing-time", help="ISO timestamp of the run (dump); default: now")
    parser.add_argument("--tables", default="", help="only these tables of the group (comma-separated)")
    parser.add_argument("--parallelism", type=int, default=DEFAULT_PARALLELISM, help="tables at a time")
    parser.add_argument("--attempt", type=int, default=1, help="the group task's try number (Airflow)")
    parser.add_argument("--dry-run", type=lambda t: t.strip().lower() in ("1", "true", "yes"), default=False)
    parser.add_argument("--until-caught-up", action="store_true", help="stream: stop once caught up")
    parser.add_argument(
        "--clock-from", default="", help="stream: ISO instant the processing time starts from"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    settings = Settings.from_env()
    if args.job == "stream":
        return _streams(args, settings)
    configs = select_members(args.group, settings, args.tables)
    started = datetime.now(UTC)  # the wall clock, read once here: a new plan records it
    run = GroupRun(
        args.group,
        args.job,
        args.run_id,
        parse_instant(args.processing_time) or started,
        started,
        args.dry_run,
        args.attempt,
    )
    return in_session(
        f"tidemark-group-{args.job}-{args.group}",
        settings,
        args.job == "seal",
        lambda spark: run_group(spark, configs, settings, run, parallelism=args.parallelism),
        extra_conf=tables_session_conf(configs, settings, job=args.job),
    )


def _streams(args: argparse.Namespace, settings: Any) -> int:
    """One application hosting the continuous queries of the group's tables in stream mode."""

    # the members at the start decide the session's jars (a member joining later with another
    # table format runs once the application restarts)
    return in_session(
        f"tidemark-group-stream-{args.group}",
        settings,
        True,
        lambda spark: run_group_streams(
            spark,
            args.group,
            settings,
            args.run_id,
            clock=stream_clock(args.clock_from),
            until_caught_up=args.until_caught_up,
        ),
        extra_conf=tables_session_conf(group_members(args.group, settings), settings, job="stream"),
    )


if __name__ == "__main__":
    sys.exit(main())
