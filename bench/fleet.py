"""A fleet of tables: how long Airflow takes to parse tidemark's DAG files at 10, 100 and
1,000 tables, with the state on the local disk and on S3, in one sitting.

    .venv/bin/python bench/fleet.py [--tables 10,100,1000] [--no-s3]

Writes N table YAMLs (the events example under other names), records each table's schema
version in the state store (as its first dump would), then times what Airflow's DAG
processor does with each file of dags/: ``shard_dags`` for each ``tidemark_tables_<i>.py``
(the DAGs of its shard's tables) and ``raise_table_problems`` for ``tidemark_config_errors.py``
(every table file checked). Airflow parses each file in its own process under its own
``dagbag_import_timeout`` (30 s by default), so the figure that matters is the slowest file;
the sum is the processor's work per parse loop. The import of Airflow and tidemark (about 2 s,
paid by each parsing process) is printed apart. The state on S3 is a local SeaweedFS (started
here). Each count is parsed twice: the first parse (no schema-check cache on this disk yet)
and the next (the cache of passed checks: one state read per table). Prints ``parse at 1000
tables = Y.Y s`` (the slowest file of the first parse, S3 state) last.

With ``--commits 100,10000,100000`` it also times, on synthetic commit logs of that many
batches (local disk), what a table's age could slow: the state a dump plans from
(``CommitLog.state``: the checkpoint and the commits after it) and the commits a rebuild of
one hour reads (the checkpoint's hour index), against reading every commit record (what the
rebuild planning did before the index). 1,000,000 works too, given the disk and the time to
write a million small files.

With ``--group-size K`` the parse sittings put every K tables in a group (their group DAGs
are built too, and grouped tables have no ingest DAG of their own).

With ``--grouped 100`` (the default; 0 skips it) it first runs one hourly cycle (dump + seal)
of N tables of 1,000 records each (``--records``), as per-table jobs (each table's dump and
seal are applications of their own, measured on ``--sample`` tables and scaled to N) and as
one group (``spark_jobs/group.py``: one application dumps all N, one seals all N), against
the local broker (started if needed): wall and CPU-seconds of every process of each job
(bench/_grouped.py). It prints ``grouped/per-table cpu = X.XX`` before the parse line.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import logging
from dataclasses import replace as changed

from _grouped import grouped_sitting
from _services import start_local_s3

from tidemark.airflow.dags import raise_table_problems, shard_dags
from tidemark.config import load_table_file
from tidemark.evolution import SchemaHistory
from tidemark.settings import Settings
from tidemark.state.batches import Commit, MqRange
from tidemark.state.commitlog import CommitLog
from tidemark_dev.services import TansuService

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"


def write_tables(conf: Path, n: int, group_size: int = 0) -> list[str]:
    """N table YAMLs; with ``group_size``, every that many tables form a group."""
    template = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    names = [f"fleet_{i:04d}" for i in range(n)]
    conf.mkdir(parents=True)
    for i, name in enumerate(names):
        data = {**template, "table": name, "source": {**template["source"], "topic": name}}
        if group_size:
            data["group"] = f"fleet_group_{i // group_size:03d}"
        (conf / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return names


def parse_once(settings: object) -> dict[str, float]:
    """Seconds per DAG file, as the DAG processor would spend them (after its imports)."""

    figures = {}
    for path in sorted(DAGS.glob("tidemark_tables_*.py")):
        started = time.perf_counter()
        shard_dags(str(path), settings)  # type: ignore[arg-type]
        figures[path.name] = time.perf_counter() - started
    started = time.perf_counter()
    raise_table_problems(settings)  # type: ignore[arg-type]
    figures["tidemark_config_errors.py"] = time.perf_counter() - started
    return figures


def sitting(n: int, state: str, home: Path, group_size: int = 0) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds per DAG file at the first parse (no schema-check cache yet) and at the next one
    (what the DAG processor's parse loop pays while no YAML or history changes)."""

    conf = home / f"conf-{n}-{state.split(':', maxsplit=1)[0]}"
    names = write_tables(conf, n, group_size)
    os.environ.update({"TIDEMARK_CONF_DIR": str(conf), "TIDEMARK_STATE_DIR": state})
    settings = Settings.from_env()
    for name in names:  # each table's first dump records its schema version
        SchemaHistory(settings.state_location, name).ensure(load_table_file(conf / f"{name}.yaml"), "bench")
    first = parse_once(settings)
    again = parse_once(settings)
    shutil.rmtree(conf)
    return first, again


def commit_log_ages(counts: list[int], home: Path) -> None:
    """State and rebuild-planning reads at several commit-log lengths (a 10 s stream writes
    about 3 million commits a year)."""

    for n in counts:
        log = CommitLog(home / f"commits-{n}", "aged")
        template = Commit(
            table="aged",
            batch_id=0,
            run_id="r",
            committed_by_run="r",
            topic="aged",
            processing_time="2026-11-22T12:00:00+00:00",
            ranges=(MqRange(0, 0, 10),),
            files=(),
            rows_per_hour={},
            mq_partitions=(),
            rows=10,
            dirty=0,
        )
        started = time.perf_counter()
        for b in range(n):  # 360 batches an hour, as a 10 s trigger writes them
            hour = f"dt=2026-11-22/hr={b // 360:06d}"
            log.write_commit(changed(template, batch_id=b, run_id=f"r{b}", rows_per_hour={hour: 10}))
        written = time.perf_counter() - started
        started = time.perf_counter()
        state = log.state()
        state_s = time.perf_counter() - started
        started = time.perf_counter()
        batches = state.batches_of_hour("dt=2026-11-22/hr=000000") or []
        read = [log.commit(b) for b in batches]
        indexed_s = time.perf_counter() - started
        started = time.perf_counter()
        scanned = sum(1 for c in log.iter_commits() if "dt=2026-11-22/hr=000000" in c.rows_per_hour)
        scan_s = time.perf_counter() - started
        assert scanned == len(read) == min(n, 360)
        print(
            f"{n:>9,} commits (written in {written:.0f} s): state {state_s * 1000:7.1f} ms | rebuild "
            f"planning of one hour: indexed {indexed_s * 1000:7.1f} ms ({len(read)} commits read), "
            f"every commit {scan_s * 1000:9.1f} ms",
            flush=True,
        )
        shutil.rmtree(home / f"commits-{n}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="10,100,1000")
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--commits", default="", help="e.g. 100,10000,100000: commit-log ages to time")
    parser.add_argument("--grouped", type=int, default=100, help="tables of the per-table/grouped cycle")
    parser.add_argument("--records", type=int, default=1000, help="records per table in that cycle")
    parser.add_argument("--sample", type=int, default=10, help="tables measured as per-table jobs")
    parser.add_argument("--group-size", type=int, default=0, help="parse: tables per group (0: none)")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.tables.split(",")]

    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-fleet-"))
    os.environ["TIDEMARK_HOME"] = str(home / "home")
    started = time.perf_counter()
    import airflow.sdk  # noqa: F401 - timed: what each DAG-processing process imports first

    from tidemark.airflow import dags  # noqa: F401, PLC0415 - timed

    print(f"imports (Airflow, tidemark): {time.perf_counter() - started:.1f} s, paid by each parsing process")
    logging.getLogger("tidemark").setLevel(logging.WARNING)  # one line per table recorded
    states = {"local": str(home / "state")}
    s3 = None
    if not args.no_s3:
        port = int(os.environ.get("BENCH_S3_PORT", "18620"))
        s3, s3_env = start_local_s3(Settings.from_env(), home / "s3", port, "fleet")
        os.environ.update(s3_env)
        states["s3"] = "s3://fleet/state"
    slowest = {}
    ratio = None
    try:
        if args.grouped:
            ratio = grouped_cycle(args, home)
        if args.commits:
            commit_log_ages([int(x) for x in args.commits.split(",")], home)
        for n in counts:
            for label, state in states.items():
                where = f"{state}-{n}" if label == "local" else f"{state}/{n}"
                first, again = sitting(n, where, home, args.group_size)
                for parse, figures in (("first", first), ("again", again)):
                    worst = max(figures, key=lambda k: figures[k])
                    shards = [v for k, v in figures.items() if k.startswith("tidemark_tables_")]
                    print(
                        f"{n:>5} tables, state {label:<5}, {parse} parse: slowest file {figures[worst]:5.2f} s "
                        f"({worst}), shard files {min(shards):.2f}-{max(shards):.2f} s, config-errors file "
                        f"{figures['tidemark_config_errors.py']:.2f} s, all files {sum(figures.values()):.2f} s",
                        flush=True,
                    )
                slowest[(n, label)] = max(first.values())
    finally:
        if s3 is not None:
            s3.stop()
        shutil.rmtree(home, ignore_errors=True)
    top = max(counts)
    label = "s3" if (top, "s3") in slowest else "local"
    if ratio is not None:
        print(f"grouped/per-table cpu = {ratio:.2f}")
    print(f"parse at {top} tables = {slowest[(top, label)]:.1f} s")
    return 0


def grouped_cycle(args: argparse.Namespace, home: Path) -> float:
    """The per-table/grouped cycle against the local broker (started here if needed)."""

    settings = Settings.from_env()
    broker = TansuService(settings)
    started_here = not broker.status().running
    broker.start()
    env = {**os.environ, "TIDEMARK_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    try:
        return grouped_sitting(
            settings.kafka_bootstrap,
            home / "cycle",
            tables=args.grouped,
            per_table=args.records,
            sample=args.sample,
            env=env,
        )
    finally:
        if started_here:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
