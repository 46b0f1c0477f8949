"""``tidemark verify``: a table checked as its readers see it against its commit log.
``tidemark spark-conf``: the Spark conf of a SQL client of one's own that reads every table
tidemark writes by name (Hive hours, Delta snapshots, Iceberg tables), for ``spark-sql
--properties-file`` or a notebook's session builder."""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Any

FORMATS = ("properties", "json", "args")


def add_reader_commands(sub: Any) -> None:
    """``tidemark spark-conf`` and ``tidemark verify`` on the CLI's subparsers."""
    command = sub.add_parser(
        "spark-conf",
        help="the Spark conf that reads every tidemark table by name (spark-sql --properties-file)",
        description="Prints what a Spark session of your own needs to read tidemark's tables by name: the "
        "metastore (the service of TIDEMARK_HIVE_METASTORE_URIS, or the embedded Derby, which one process "
        "holds at a time), s3a for a warehouse on S3, delta-spark for Delta snapshots and Iceberg's runtime "
        "and catalog (iceberg.default.<table>). Example: tidemark spark-conf --show-secrets > reader.conf; "
        "spark-sql --properties-file reader.conf -e 'SELECT * FROM orders_snapshot'. Secrets (catalog "
        "passwords, S3 keys) are masked unless --show-secrets.",
    )
    command.add_argument("--format", choices=FORMATS, default="properties", help="default: properties")
    command.add_argument("--show-secrets", action="store_true", help="print passwords and keys as they are")
    command.set_defaults(func=cmd_spark_conf)
    verify = sub.add_parser(
        "verify",
        help="check a table as readers see it against its commit log (exits non-zero on a violation)",
        description="Reads the table as its readers do (the metastore's partitions, or the Iceberg snapshot) "
        "and checks: committed offsets contiguous per MQ partition (holes only as recorded gaps, restarts only "
        "at a rebase), every data file read once, each published hour's rows equal to its committed rows, and "
        "no data file outside a registered version or a committed batch beyond output.version_retention. "
        "What the maintenance DAG runs daily (spark-submit spark_jobs/verify.py).",
    )
    verify.add_argument("--table", required=True)
    verify.set_defaults(func=cmd_verify)
    retention = sub.add_parser(
        "retention",
        help="drop what is past a table's retention: hours, dirty records, late rows (what the maintenance "
        "DAG runs daily)",
        description="Drops the sealed hours that ended more than retention.hours ago, whole: one journal entry "
        "and an audit record name them, their partitions are unregistered, and their files are deleted once "
        "output.version_retention has passed since the drop. Then the dirty records of batches committed more "
        "than retention.dirty ago, and the late side table's hours older than retention.late, each audited "
        "(spark-submit spark_jobs/retention.py).",
    )
    retention.add_argument("--table", required=True)
    retention.add_argument("--dry-run", action="store_true", help="only log the hours that would go")
    retention.set_defaults(func=cmd_retention)
    compact = sub.add_parser(
        "compact",
        help="merge back the small files of amended hours and of a Delta or Iceberg snapshot (what the "
        "maintenance DAG runs daily)",
        description="Writes each hour that amendments left in more files than its bytes need (more than "
        "compaction.max_files_per_hour, or smaller than compaction.min_file_fraction of the target on average) "
        "again as one new version, the same rows swapped in at once; merges a CDC table's Delta or Iceberg "
        "snapshot back by the same rules (one maintenance commit); then deletes replaced versions past "
        "output.version_retention (spark-submit spark_jobs/compact.py).",
    )
    compact.add_argument("--table", required=True)
    compact.add_argument("--dry-run", action="store_true", help="only log the hours that are due")
    compact.set_defaults(func=cmd_compact)


def cmd_verify(args: argparse.Namespace) -> int:
    return _submit_maintenance(args.table, "verify", as_of=True)  # orphans are judged at its instant


def cmd_retention(args: argparse.Namespace) -> int:
    return _submit_maintenance(
        args.table, "retention", as_of=True, dry_run=args.dry_run
    )  # hours aged from it


def cmd_compact(args: argparse.Namespace) -> int:
    return _submit_maintenance(args.table, "compact", dry_run=args.dry_run)


def _submit_maintenance(table: str, job: str, *, as_of: bool = False, dry_run: bool | None = None) -> int:
    """spark-submit a maintenance job by hand, as the maintenance DAG runs it: the caller's
    instant names the run (and is its ``--as-of`` where the job takes one)."""
    from datetime import UTC, datetime

    from tidemark.jobs import submit_job

    now = datetime.now(UTC).isoformat()
    extra = ["--run-id", f"{job}__{now}"]
    if as_of:
        extra += ["--as-of", now]
    if dry_run is not None:
        extra += ["--dry-run", str(dry_run)]
    return submit_job(table, job, extra)


def cmd_spark_conf(args: argparse.Namespace) -> int:
    from tidemark.jobs import sql_client_conf
    from tidemark.masking import masked
    from tidemark.settings import Settings

    conf = sql_client_conf(Settings.from_env())
    if not args.show_secrets:
        conf = {k: str(v) for k, v in masked(conf).items()}
    print(render_conf(conf, args.format))
    return 0


def render_conf(conf: dict[str, str], form: str) -> str:
    """``conf`` as spark-defaults.conf lines, JSON, or spark-submit's ``--conf`` arguments."""
    if form == "json":
        return json.dumps(conf, indent=2, sort_keys=True)
    if form == "args":
        return " ".join(f"--conf {shlex.quote(f'{k}={v}')}" for k, v in sorted(conf.items()))
    return "\n".join(f"{k} {v}" for k, v in sorted(conf.items()))
