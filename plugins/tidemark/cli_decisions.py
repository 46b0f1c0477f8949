"""The operator's commands out of a stopped state, each recorded in the table's audit log or
journal: ``resolve`` (a stuck batch), ``unlock`` (a lock of a lost host), ``switch`` (batch or
stream writes the table) and ``release`` (a quarantined hour)."""

from __future__ import annotations

import argparse


def cmd_resolve(args: argparse.Namespace) -> int:
    """Record and apply an operator decision about a stuck batch (no Spark needed)."""
    import getpass
    from datetime import UTC, datetime

    from tidemark.catalog import load_table
    from tidemark.ingest.resolve import resolve
    from tidemark.settings import Settings

    settings = Settings.from_env()
    config = load_table(args.table, settings)
    record = resolve(
        config,
        settings,
        action=args.action,
        reason=args.reason,
        by=args.by or getpass.getuser(),
        at=datetime.now(UTC),  # the decision's wall clock, for the audit record
    )
    print(f"{config.table}: recorded {record.describe()}")
    return 0


def cmd_unlock(args: argparse.Namespace) -> int:
    """Free a table lock left by a lost host (a job on this host frees its own, or is broken
    once its process is gone), recording the decision."""
    import getpass
    from datetime import UTC, datetime

    from tidemark.catalog import load_table
    from tidemark.ingest.approvals import unlock
    from tidemark.settings import Settings

    settings = Settings.from_env()
    config = load_table(args.table, settings)
    by = args.by or getpass.getuser()
    record = unlock(config, settings, reason=args.reason, by=by, at=datetime.now(UTC), lock=args.lock)
    if record is None:
        print(f"{config.table}: the {args.lock} lock is free; nothing to do")
        return 0
    print(f"{config.table}: released; recorded {record.describe()}")
    return 0


def cmd_switch(args: argparse.Namespace) -> int:
    """Hand the table to the batch DAG or to the stream (audited; no Spark needed)."""
    import getpass
    from datetime import UTC, datetime

    from tidemark.catalog import load_table
    from tidemark.settings import Settings
    from tidemark.state.mode import STREAM
    from tidemark.table import Table

    settings = Settings.from_env()
    config = load_table(args.table, settings)
    mode, changed = Table.read(config, settings).state.writer.switch(
        args.to, by=args.by or getpass.getuser(), reason=args.reason, at=datetime.now(UTC).isoformat()
    )
    if not changed:
        print(f"{config.table}: already written by the {mode.describe()}; nothing to do")
    elif args.to == STREAM:
        print(
            f"{config.table}: now written by the stream; the batch DAG's dumps skip. Start it: "
            f"tidemark stream --table {config.table} (or the DAG tidemark_stream_{config.table})"
        )
    else:
        print(
            f"{config.table}: now written by the batch DAG; a running stream stops after its current "
            f"micro-batch (tidemark status --table {config.table} shows when)"
        )
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    """Register a quarantined hour in-process (a Hive-enabled Spark session, ~10 s to start)."""
    from tidemark.catalog import load_table
    from tidemark.jobs import tables_session_conf
    from tidemark.seal.sealing import run_release
    from tidemark.settings import Settings
    from tidemark.spark import build_session

    settings = Settings.from_env()
    config = load_table(args.table, settings)
    spark = build_session(
        f"tidemark-release-{config.table}",
        settings,
        hive=True,
        extra_conf=tables_session_conf([config], settings, job="release"),
    )
    try:
        entry = run_release(spark, config, settings, args.hour, args.run_id or f"release__{args.hour}")
    finally:
        spark.stop()
    print(
        f"{config.table} hour {entry.hour} released: registered with {entry.rows} rows (journal entry {entry.seq})"
    )
    return 0
