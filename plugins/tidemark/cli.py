"""The ``tidemark`` command line: table configs, jobs, status and operator decisions (the local
services and the demo of a development machine: ``tidemark-dev``)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tidemark import __version__
from tidemark.cli_decisions import cmd_release, cmd_resolve, cmd_switch, cmd_unlock
from tidemark.cli_fleet import add_fleet_commands
from tidemark.cli_readers import add_reader_commands
from tidemark.cli_tables import add_tables_command, cmd_maintain, cmd_schema
from tidemark.errors import TidemarkError

log = logging.getLogger("tidemark")

DESCRIPTION = """\
tidemark lands message-queue (Kafka-protocol) data in Hive-partitioned tables, exactly once,
by event time, with Airflow orchestrating idempotent Spark jobs.

Deployment settings come from TIDEMARK_* environment variables (TIDEMARK_HOME,
TIDEMARK_KAFKA_BOOTSTRAP, TIDEMARK_SPARK_MASTER, ...); tables from conf/tables/*.yaml.
Local services (broker, Airflow, PostgreSQL, metastore, S3, Spark) and the demo: tidemark-dev.
"""

EPILOG = """\
examples:
  tidemark tables validate           check every table YAML, listing all problems
  tidemark tables show events        the effective configuration, defaults included
  tidemark tables init --from-registry clicks-value --registry-url http://registry:8081 --write
                                     a table YAML from an Avro subject's latest schema
  tidemark dump --table events --run-id manual__1
                                     one exactly-once micro-batch (retry-safe)
  tidemark status --table events     batches, offsets, lag per MQ partition, dirty counts
  tidemark bootstrap --table orders -- --source-kind parquet --source /data/orders_export
                                     full snapshot, aligned to the orders topic's offsets
  tidemark seal --table events        seal the hours that are complete (what the DAGs run)
  tidemark merge --table orders --snapshot 2026-11-22
                                     snapshot of a day from the sealed increment hours
  tidemark resolve --table events --action skip --reason "poison range, INC-42"
                                     get past a batch that fails the same way on every run
  tidemark replay --table events --batches all --reason "schema fixed, INC-43"
                                     land the dirty records that are valid now
"""


def _cmd_status(args: argparse.Namespace) -> int:
    from tidemark.catalog import load_table
    from tidemark.observe.status import explain_hour, render, render_hour, table_status
    from tidemark.settings import Settings

    settings = Settings.from_env()
    config = load_table(args.table, settings)
    if args.hour:
        info = explain_hour(config, settings, args.hour)
        print(json.dumps(info, indent=2, default=str) if args.json else render_hour(info))
        return 0
    status = table_status(config, settings)
    print(json.dumps(status, indent=2, default=str) if args.json else render(status))
    return 0


def _spark_submit(table: str, job: str, job_args: list[str]) -> int:
    """spark-submit ``spark_jobs/<job>.py`` with the configured master (what the DAGs run)."""
    from tidemark.jobs import submit_job

    return submit_job(table, job, job_args)


def _cmd_dump(args: argparse.Namespace) -> int:
    extra = ["--processing-time", args.processing_time] if args.processing_time else []
    return _spark_submit(args.table, "dump", ["--run-id", args.run_id, *extra])


def _cmd_seal(args: argparse.Namespace) -> int:
    """The seal job the ingest and seal DAGs run (spark-submit spark_jobs/seal.py)."""
    from datetime import UTC, datetime

    run_id = args.run_id or f"seal__{datetime.now(UTC).isoformat()}"  # sealing is safe to repeat
    job_args = ["--run-id", run_id, "--dry-run", str(args.dry_run).lower()]
    return _spark_submit(
        args.table, "seal", [*job_args, *(["--release", args.release] if args.release else [])]
    )


def _cmd_rebuild(args: argparse.Namespace) -> int:
    run_id = args.run_id or f"rebuild__{args.hours.replace(',', '_')}"
    return _spark_submit(args.table, "rebuild", ["--run-id", run_id, "--hours", args.hours])


def _cmd_bootstrap(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    as_of = args.as_of or datetime.now(UTC).isoformat()  # the caller's instant, as run_after in Airflow
    run_id = args.run_id or f"bootstrap__{as_of}"
    source_args = [a for a in args.source_args if a != "--"]
    return _spark_submit(args.table, "bootstrap", ["--run-id", run_id, "--as-of", as_of, *source_args])


def _cmd_merge(args: argparse.Namespace) -> int:
    run_id = args.run_id or f"merge__{args.snapshot}"
    return _spark_submit(args.table, "merge", ["--run-id", run_id, "--snapshot", args.snapshot])


def _cmd_replay(args: argparse.Namespace) -> int:
    """Replay dirty records (spark-submit spark_jobs/replay.py), the decision's clock read here."""
    import getpass
    from datetime import UTC, datetime

    at = datetime.now(UTC).isoformat()  # the caller's instant, decided once (a retry reuses the plan)
    run_id = args.run_id or f"replay__{at}"
    job_args = ["--run-id", run_id, "--batches", args.batches, "--reason", args.reason]
    return _spark_submit(args.table, "replay", [*job_args, "--by", args.by or getpass.getuser(), "--at", at])


def _cmd_stream(args: argparse.Namespace) -> int:
    """The table's stream in the foreground (spark-submit spark_jobs/stream.py)."""
    import socket
    from datetime import UTC, datetime

    run_id = args.run_id or f"stream__{socket.gethostname()}__{datetime.now(UTC).isoformat()}"
    job_args = ["--run-id", run_id, *(["--until-caught-up"] if args.until_caught_up else [])]
    if args.trigger_interval:
        job_args += ["--trigger-interval", args.trigger_interval]
    return _spark_submit(args.table, "stream", job_args)


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tidemark.catalog import load_table
    from tidemark.observe.report import write_report
    from tidemark.settings import Settings

    settings = Settings.from_env()
    target = write_report(load_table(args.table, settings), settings, Path(args.out) if args.out else None)
    print(f"health report: {target}")
    return 0


def _decision_arguments(parser: argparse.ArgumentParser) -> None:
    """Why and who, of an operator decision kept in the table's audit log."""
    parser.add_argument("--reason", required=True, help="why: kept in the audit log")
    parser.add_argument("--by", help="who decides (default: the current user)")


def _table_command(
    sub: Any, name: str, func: Callable[[argparse.Namespace], int], *, decision: bool = False, **texts: str
) -> argparse.ArgumentParser:
    """A subcommand about one table: ``--table``, its handler, and for an operator decision
    ``--reason`` and ``--by``."""
    command: argparse.ArgumentParser = sub.add_parser(name, **texts)
    command.add_argument("--table", required=True)
    if decision:
        _decision_arguments(command)
    command.set_defaults(func=func)
    return command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidemark",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tidemark {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dump = _table_command(
        sub,
        "dump",
        _cmd_dump,
        help="run one exactly-once micro-batch of a table (spark-submit)",
        description="Dump the next micro-batch of TABLE, keyed by RUN_ID: re-running the same run id "
        "re-does (or confirms) the same batch, never a second one.",
    )
    dump.add_argument("--run-id", required=True, help="idempotency key (the Airflow run id)")
    dump.add_argument("--processing-time", help="ISO timestamp recorded in the plan (default: now)")

    switch = _table_command(
        sub,
        "switch",
        cmd_switch,
        help="hand a table to the batch DAG or to the continuous stream (audited)",
        description="Make the batch DAG (--to batch) or the stream (--to stream) the only writer of TABLE. "
        "Both run the same commit protocol on the same commit log, so the other side goes on exactly where "
        "this one stopped. Switching to batch stops a running stream after its current micro-batch.",
        decision=True,
    )
    switch.add_argument("--to", required=True, choices=["batch", "stream"])

    stream = _table_command(
        sub,
        "stream",
        _cmd_stream,
        help="run a table's continuous writer in the foreground (spark-submit spark_jobs/stream.py)",
        description="Micro-batches every stream.trigger_interval through the dump protocol, sealing hours as "
        "the ready time passes them, until the table is switched to batch (or, with --until-caught-up, "
        "until everything the broker had at the start is committed). Needs tidemark switch --to stream.",
    )
    stream.add_argument("--run-id", help="the stream's run id (default: host and start time)")
    stream.add_argument("--until-caught-up", action="store_true", help="stop once caught up (a catch-up run)")
    stream.add_argument("--trigger-interval", help="override stream.trigger_interval, e.g. 5s")

    maintain = _table_command(
        sub,
        "maintain",
        cmd_maintain,
        help="an Iceberg table: expire snapshots past output.version_retention, delete their metadata",
        description="What tidemark_maintain_<table> runs daily: snapshots committed more than "
        "output.version_retention ago are expired (never the current one), then the metadata files no kept "
        "snapshot references; the next seal deletes the hour versions no snapshot holds any more.",
    )
    maintain.add_argument("--dry-run", action="store_true", help="only print what would go")

    status = _table_command(
        sub, "status", _cmd_status, help="batches, committed offsets, lag and dirty counts of a table"
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--hour",
        "--partition",  # the option's first name, kept as an alias
        dest="hour",
        metavar="YYYY-MM-DDTHH",
        help="explain one hour: sealed or not, and if not which MQ partition's watermark holds it",
    )

    seal = _table_command(
        sub,
        "seal",
        _cmd_seal,
        help="seal, register and amend the complete hours (spark-submit spark_jobs/seal.py; what the DAGs run)",
        description="Compact, reconcile and check every hour the global ready time (and processing time) "
        "has passed by commit_delay, register it in the metastore, write its _SUCCESS and journal it; fold "
        "late rows per late_policy. Safe to repeat: an hour is sealed once.",
    )
    seal.add_argument("--run-id", help="recorded in the hour journal (default seal__<now>)")
    seal.add_argument(
        "--dry-run", action="store_true", help="list the hours a seal would register; change nothing"
    )
    seal.add_argument("--release", default="", help="comma-separated quarantined hours to register first")

    rebuild = _table_command(
        sub,
        "rebuild",
        _cmd_rebuild,
        help="rebuild sealed hours from the broker (spark-submit spark_jobs/rebuild.py; what the rebuild DAG runs)",
    )
    rebuild.add_argument(
        "--hours", required=True, help="comma-separated hour keys, e.g. 2026-11-22T10,2026-11-22T11"
    )
    rebuild.add_argument("--run-id", help="idempotency key (default rebuild__<hours>)")

    bootstrap = _table_command(
        sub,
        "bootstrap",
        _cmd_bootstrap,
        help="bulk-load a full snapshot of a CDC table (spark-submit spark_jobs/bootstrap.py)",
        description="Record the CDC topic's end offsets, read the source, publish the snapshot. Source "
        "arguments go to the job, after --: --source-kind jdbc|parquet|csv --source URL_OR_PATH [--source-table T | "
        "--query SQL] [--partition-column C --num-partitions N] [--label L]. Credentials: "
        "TIDEMARK_SOURCE_USER / TIDEMARK_SOURCE_PASSWORD in the environment.",
    )
    bootstrap.add_argument("--run-id", help="idempotency key (default bootstrap__<as-of>)")
    bootstrap.add_argument("--as-of", help="ISO instant the snapshot stands for (default: now)")
    bootstrap.add_argument("source_args", nargs=argparse.REMAINDER, help="the job's source arguments")

    merge = _table_command(
        sub,
        "merge",
        _cmd_merge,
        help="merge sealed increment hours into a snapshot (spark-submit spark_jobs/merge.py)",
    )
    merge.add_argument("--snapshot", required=True, help="a day (2026-11-22) or an hour (2026-11-22T13)")
    merge.add_argument("--run-id", help="idempotency key (default merge__<snapshot>)")

    release = _table_command(
        sub,
        "release",
        cmd_release,
        help="register an hour the quality gate quarantined, after checking its data",
        description="Register a quarantined hour of TABLE in the metastore and journal the release, so "
        "the next announce emits its Asset event. Refuses hours that are not quarantined.",
    )
    release.add_argument(
        "--hour", "--partition", dest="hour", required=True, metavar="YYYY-MM-DDTHH", help="the hour key"
    )
    release.add_argument("--run-id", help="recorded in the journal (default release__<hour>)")

    resolve = _table_command(
        sub,
        "resolve",
        cmd_resolve,
        help="decide about a stuck batch: replan, skip (a recorded gap), accept (past the dirty gate) or rebase",
        description="Every run completes the pending batch before planning a new one, so a failure that "
        "repeats on the same offsets stops the table until somebody decides. replan: close the pending "
        "batch reading nothing, the next run plans afresh; skip: close it and record its offsets as a gap; "
        "accept: the next run commits it although its dirty records exceed max_dirty_ratio; rebase: after "
        "OffsetsWentBackError (topic recreated or truncated), restart the affected MQ partitions at the "
        "broker's earliest offsets. Each decision is kept in the table's audit log (tidemark status).",
        decision=True,
    )
    resolve.add_argument(
        "--action", required=True, choices=["replan", "skip", "accept", "rebase", "accept-loss"]
    )

    replay = _table_command(
        sub,
        "replay",
        _cmd_replay,
        help="classify dirty records again and land those valid now (after a schema or producer fix)",
        description="A batch of its own: the dirty records of the chosen batches are classified again by "
        "today's config and clock; the valid ones become rows (late rows if their hour is sealed), the "
        "others stay in <table>__dirty with today's reason. The replayed records move to the hidden "
        "<table>__dirty/_replayed, so every record stays in exactly one place. Kept in the audit log.",
        decision=True,
    )
    replay.add_argument("--batches", default="all", help="'all' (default) or batch ids, e.g. 3,5")
    replay.add_argument("--run-id", help="idempotency key: rerun with it to finish a failed replay")

    unlock = _table_command(
        sub,
        "unlock",
        cmd_unlock,
        help="free a table lock left by a lost host (recorded in the audit log)",
        description="A lock whose holder's process is gone on this host is broken by the next job; one "
        "of another host once its lease expires (TIDEMARK_LOCK_LEASE_S, default 600). Use this when that "
        "host is known to be gone for good: a holder that comes back finds its lease lost and stops.",
        decision=True,
    )
    unlock.add_argument("--lock", default="batch", help="the lock's name (default batch)")

    report = _table_command(
        sub,
        "report",
        _cmd_report,
        help="write the table's ingestion health page (static HTML with plots)",
        description="Watermarks, rows, late and dirty rates, freshness and quality per hour, from the "
        "state store. Default output: $TIDEMARK_HOME/state/<table>/reports/health.html.",
    )
    report.add_argument("--out", help="output file (default under the state dir)")

    schema = _table_command(
        sub,
        "schema",
        cmd_schema,
        help="a table's schema history, and whether its YAML's schema is a compatible change",
    )
    schema.add_argument("--json", action="store_true")

    add_tables_command(sub)
    add_reader_commands(sub)
    add_fleet_commands(sub, _decision_arguments)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv``, log at INFO (``-v``: DEBUG) and run the chosen command; a named error
    becomes its message and exit code 2 (``tidemark`` and ``tidemark-dev`` alike)."""
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except TidemarkError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
