"""One hourly cycle of one table against its floor, in one sitting: the dump and the seal as
the ingest DAG runs them, and the least any implementation must spend on the same records.

    .venv/bin/python bench/pipeline.py [--messages 1000000] [--hours 1] [--partitions 4]

Produces N JSON events (~200 B) spread over H event-time hours to a fresh topic of the local
broker (started if needed), plus one record per partition past the last hour so every hour
seals. Then runs the real jobs as spark-submit runs them (``spark_jobs/dump.py``, then
``spark_jobs/seal.py``, local warehouse and state) and prints:

- the dump's and the seal's processing seconds, on one footing: each process from its start
  to its exit (the interpreter, imports, config and planning included), less Spark's session
  start where one started; their phases, per hour where H > 1; the CPU seconds of each one's
  process tree (the dump's forked readers included), and the seal's per phase
  (``TIDEMARK_PHASE_CPU=1``);
- the jobs run with their bytecode cached, as a deployment's do (Python's default; the
  bench's own cache directory, whatever ``PYTHONDONTWRITEBYTECODE`` says here);
- the end-to-end seconds with the JVM starts;
- before the cycle, the table is registered (and the embedded metastore's schema made), as
  every seal but a table's first finds it (``--cold-metastore``: the measured seal pays it);
- the metastore is, as ``make up`` runs it, the service over the home's Derby database (the
  jobs find it; ``--metastore local``, the default); ``--metastore service``: the Thrift
  metastore on PostgreSQL, as a production deployment runs one; ``--metastore embedded``: Derby
  opened by each job (no service: the seal then starts Spark for Hive's client);
- the floor: one pyarrow process consumes the same records, parses them, writes one file per
  hour and batch, compacts each hour into one file and computes the default checks (key not
  null, key unique, event time inside the hour).

It prints ``seal/dump CPU``, ``seal/dump = X.XX`` and ``pipeline/floor = Y.YY`` last
(processing seconds; the floor runs in this process, so it pays no interpreter start). To
compare two versions of tidemark in one sitting, run it again with ``PYTHONPATH`` pointing
at the other checkout's ``plugins`` (the jobs and their Python workers inherit it; the
library used is printed).
Not a test: the figures are for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import io
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import os

from dump_throughput import (
    CHUNK,
    ROOT,
    START,
    _consume,
    bench_table,
    dump_command,
    event_schema,
    last_json,
    produce_sealable,
    run_measured,
    run_tree,
)

import tidemark
from tidemark.settings import Settings
from tidemark_dev.derby_metastore import DerbyMetastoreService
from tidemark_dev.net import free_port
from tidemark_dev.postgres import MetastoreService, PostgresService
from tidemark_dev.services import TansuService

DUMP_PHASES = ("rollback", "read_stage", "reconcile", "publish", "commit")


# Run in the jobs' environment before the measured cycle: the table registered, as it is for
# every seal but its first (an Iceberg table's seal creates it through its catalog, and starts
# Spark anyway); with embedded Derby, the metastore's schema too.
PREPARE = """
import sys

from tidemark.catalog import load_table
from tidemark.hourcommit.iceberg_files import table_schema
from tidemark.iceberg_catalog import open_catalog
from tidemark.jobs import in_session, tables_session_conf
from tidemark.seal.hourfiles import HourFiles
from tidemark.settings import Settings
from tidemark.table import Table

settings = Settings.from_env()
config = load_table(sys.argv[1], settings)


def create(spark):
    files = HourFiles(spark, Table.open(config, settings))
    files.metastore.connect()
    if config.output.table_format == "hive":
        files.metastore.ensure_table(config.table, files.layout.table_dir)
    else:  # the Iceberg table, from the hours' columns (Spark's runtime creates it)
        files.publication.create(table_schema(files.arrow_schema(), {"dt": "", "hr": ""}), ["dt", "hr"])
    return {}


if config.output.table_format == "iceberg":  # its namespace, whichever library version runs this
    open_catalog(settings)
in_session("bench-prepare", settings, True, create, extra_conf=tables_session_conf([config], settings, job="seal"))
"""


def prepare_metastore(env: dict[str, str], table: str = "bench") -> float:
    """The table registered before the measured cycle, as a table's steady-state seal finds it
    (with embedded Derby, the metastore's schema is made then too: ~5 s, once per deployment);
    returns its wall seconds."""
    started = time.perf_counter()
    run_measured([sys.executable, "-c", PREPARE, table], env)
    return time.perf_counter() - started


def compile_library(env: dict[str, str]) -> None:
    """The library's and the jobs' bytecode written to the jobs' cache before the cycle: neither
    measured job compiles what the other would find compiled."""
    library = Path(tidemark.__file__).parent
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(library), str(ROOT / "spark_jobs")],
        env=env,
        check=True,
    )


def start_local_metastore(env: dict[str, str], started: list[Any]) -> str:
    """What ``make up`` runs: the metastore service over the home's Derby database (``env``'s
    home), on a free port; the jobs find it by themselves. Returns its URI."""
    service = DerbyMetastoreService(replace(Settings.from_env(env), metastore_port=free_port()))
    service.start()
    started.append(service)
    return service.address()


def start_metastore_service(env: dict[str, str], started: list[Any]) -> str:
    """PostgreSQL and the Thrift metastore on free ports, for the jobs' ``env`` (their home and
    warehouse); returns the service's URI (``started`` gets each service, to stop)."""
    own = replace(Settings.from_env(env), postgres_port=free_port(), metastore_port=free_port())
    for service in (PostgresService(own), MetastoreService(own)):
        service.start()
        started.append(service)
    return MetastoreService(own).address()


def run_cycle(env: dict[str, str], total: int, processing: Any, *, profile: str = "") -> dict[str, Any]:
    """The dump, then the seal, as the DAG's tasks run them (``profile``: the seal's cProfile
    statistics written there)."""
    out, dump_wall, dump_cpu, _ = run_tree(dump_command(processing), env)
    dumped = last_json(out)
    if dumped["read"] != total:
        raise SystemExit(f"dump read {dumped['read']} records, expected {total}")
    sizes = sorted(
        p.stat().st_size for p in (Path(env["TIDEMARK_HOME"]) / "warehouse").rglob("_open/**/*.parquet")
    )
    seal_cmd = [
        sys.executable,
        *(["-m", "cProfile", "-o", profile] if profile else []),
        str(ROOT / "spark_jobs" / "seal.py"),
        "--table",
        "bench",
        "--run-id",
        "seal-1",
    ]
    errors: list[str] = []
    out, seal_wall, seal_cpu, _ = run_tree(seal_cmd, env, errors=errors)
    sealed = last_json(out)
    why = [
        line.split(": ", 1)[-1] for line in errors[0].splitlines() if "starting Spark, first needed" in line
    ]
    sealed["spark_why"] = why[0].split("first needed by ", 1)[-1] if why else ""
    for line in errors[0].splitlines():
        if "failed in the shared compaction" in line or " adopts its " in line:
            print(f"       the seal: {line.split(': ', 1)[-1]}")
    return {
        "seal_cpu_s": seal_cpu,
        "seal_phases_cpu": sealed.get("cpu_timings", {}),
        # both jobs on one footing: the process from its start to its exit (the interpreter,
        # imports, config, planning), less Spark's session start where one started
        "dump_s": dump_wall - dumped.get("session_start_s", 0.0),
        "dump_phases_s": sum(dumped["timings"][k] for k in DUMP_PHASES),
        "dump_cpu_s": dump_cpu,
        "dump_wall_s": dump_wall,
        "dump_phases": {k: round(v, 2) for k, v in dumped["timings"].items()},
        "seal_s": seal_wall - sealed["session_start_s"],
        "seal_wall_s": seal_wall,
        "seal_phases": sealed.get("timings", {}),
        "sealed": sealed["sealed"],
        "spark_why": sealed["spark_why"],
        "batch_files": sizes,
        "hour_timings": sealed.get("hour_timings", {}),
    }


def report(cycle: dict[str, Any], total: int, n_hours: int) -> None:
    """One cycle's figures: the dump's and the seal's processing, phases, end to end."""
    hours = [h for h in cycle["sealed"] if h.startswith("2026")]
    print(
        f"dump   processing {cycle['dump_s']:6.2f} s ({total / cycle['dump_s']:>9,.0f} rec/s; "
        f"wall with the JVM start {cycle['dump_wall_s']:.1f} s; its phases {cycle['dump_phases_s']:.2f} s) "
        f"phases {cycle['dump_phases']}"
    )
    print(f"       dump CPU {cycle['dump_cpu_s']:.1f} s (its process tree: the forked readers included)")
    sizes = cycle["batch_files"]
    if sizes:
        print(
            f"       batch files: {len(sizes)}, {sizes[0] / 2**20:.1f}-{sizes[-1] / 2**20:.1f} MiB "
            f"(median {sizes[len(sizes) // 2] / 2**20:.1f})"
        )
    print(
        f"seal   processing {cycle['seal_s']:6.2f} s ({total / cycle['seal_s']:>9,.0f} rec/s; "
        f"wall with the JVM start {cycle['seal_wall_s']:.1f} s), {len(hours)} hours sealed"
    )
    print(f"       seal phases (s): {cycle['seal_phases']}")
    print(
        f"       seal CPU {cycle['seal_cpu_s']:.1f} s (its process tree, the JVM start included); "
        f"phases CPU (s): {cycle['seal_phases_cpu']}"
    )
    print(f"       Spark started by the seal: {cycle['spark_why'] or 'no'}")
    big = [h for h in hours if sum(cycle["hour_timings"].get(h, {}).values()) > 0]
    for hour in big[:3]:
        print(f"       hour {hour}: {cycle['hour_timings'][hour]}")
    if n_hours > 1:
        print(
            f"       per sealed hour: {cycle['seal_s'] / len(hours):.2f} s ({total / len(hours):,.0f} rows an hour)"
        )
    print(
        f"pipeline processing {cycle['dump_s'] + cycle['seal_s']:.2f} s; end to end with the JVM starts "
        f"{cycle['dump_wall_s'] + cycle['seal_wall_s']:.1f} s"
    )


def floor(bootstrap: str, topic: str, ends: dict[int, int], out_dir: Path) -> dict[str, float]:
    """pyarrow alone: consume + parse + one file per hour and chunk, then per hour: read its
    files, write one, and the default checks."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pa_json
    import pyarrow.parquet as pq

    schema = event_schema()
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    pending: list[bytes] = []
    chunks = [0]

    def flush() -> None:
        if not pending:
            return
        table = pa_json.read_json(io.BytesIO(b"\n".join(pending)), parse_options=options)
        pending.clear()
        hours = pc.floor_temporal(table["event_time"], unit="hour")
        for hour in pc.unique(hours).to_pylist():
            part = table.filter(pc.equal(hours, pa.scalar(hour, hours.type)))
            directory = out_dir / "open" / hour.strftime("%Y%m%dT%H")
            directory.mkdir(parents=True, exist_ok=True)
            pq.write_table(part, directory / f"chunk-{chunks[0]:05d}.parquet")
        chunks[0] += 1

    def on_batch(values: list[bytes]) -> None:
        pending.extend(values)
        if len(pending) >= CHUNK:
            flush()

    started = time.perf_counter()
    _consume(bootstrap, topic, ends, on_batch)
    flush()
    dumped = time.perf_counter()
    for directory in sorted((out_dir / "open").iterdir()):
        table = pq.read_table(directory, schema=schema)
        target = out_dir / "sealed" / directory.name
        target.mkdir(parents=True)
        pq.write_table(table, target / "part-0.parquet")
        start = pc.min(pc.floor_temporal(table["event_time"], unit="hour")).as_py()
        ids = table["event_id"]
        checks = {
            "nulls": ids.null_count,
            "duplicates": table.num_rows - pc.count_distinct(ids).as_py(),
            "outside": pc.sum(
                pc.or_(
                    pc.less(table["event_time"], pa.scalar(start, table["event_time"].type)),
                    pc.greater_equal(
                        table["event_time"], pa.scalar(start + timedelta(hours=1), table["event_time"].type)
                    ),
                )
            ).as_py(),
        }
        assert checks["duplicates"] == 0 and checks["nulls"] == 0, checks
    done = time.perf_counter()
    return {"floor_dump_s": dumped - started, "floor_seal_s": done - dumped, "floor_s": done - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--hours", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--cold-metastore",
        action="store_true",
        help="measure the first seal of a new table and deployment: it creates the table and Derby's metastore schema",
    )
    parser.add_argument(
        "--metastore",
        choices=("local", "embedded", "service"),
        default="local",
        help="local: the metastore service over the home's Derby database (what make up and make demo "
        "run); embedded: Derby in each job (no service); service: the metastore on PostgreSQL",
    )
    parser.add_argument(
        "--table-formats",
        default="hive",
        help="comma-separated output.table_format values, each a cycle of its own table on the "
        "same topic, alternating (hive,iceberg prints iceberg/hive for the seal)",
    )
    parser.add_argument(
        "--target-file-size",
        default="",
        help="output.target_file_size of the table (e.g. 8MiB: hours of several files, which "
        "the seal compacts with Spark rather than in one pass of pyarrow)",
    )
    parser.add_argument(
        "--profile-seal",
        default="",
        help="write the seal's cProfile statistics to PATH.<format> (python -m pstats PATH.hive); "
        "the figures then include the profiler's overhead",
    )
    args = parser.parse_args(argv)
    formats = [f.strip() for f in args.table_formats.split(",") if f.strip()]

    settings = Settings.from_env()
    broker = TansuService(settings)
    broker_started_here = not broker.status().running
    broker.start()
    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-pipeline-"))
    services: list[Any] = []
    try:
        span = timedelta(hours=args.hours)
        topic = f"bench_{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        ends, value_bytes = produce_sealable(
            settings.kafka_bootstrap, topic, args.messages, args.partitions, span=span
        )
        total = sum(ends.values())
        print(
            f"produced {total:,} messages ({value_bytes / 1e6:.0f} MB) over {args.hours} h in "
            f"{time.perf_counter() - t0:.1f} s; {platform.node()}; library {Path(tidemark.__file__).parent}"
        )

        cycles: dict[str, dict[str, Any]] = {}
        for table_format in formats:
            own = home / table_format
            bench_table(
                own / "conf",
                topic,
                max(ends.values()),
                output={
                    "table_format": table_format,
                    **({"target_file_size": args.target_file_size} if args.target_file_size else {}),
                },
            )
            env = {
                **os.environ,
                "TIDEMARK_HOME": str(own / "run"),
                "TIDEMARK_CONF_DIR": str(own / "conf"),
                "TIDEMARK_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
                "TIDEMARK_PHASE_CPU": "1",  # the seal's CPU seconds per phase
                "PYTHONPYCACHEPREFIX": str(home / "pycache"),  # written by the preparation
            }
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            compile_library(env)
            if args.metastore == "service":
                env["TIDEMARK_HIVE_METASTORE_URIS"] = start_metastore_service(env, services)
                print(f"metastore service at {env['TIDEMARK_HIVE_METASTORE_URIS']}")
            elif args.metastore == "local":  # found by the jobs through its pid file
                env.pop("TIDEMARK_HIVE_METASTORE_URIS", None)
                print(f"metastore service on the home's Derby at {start_local_metastore(env, services)}")
            else:
                env["TIDEMARK_HIVE_METASTORE_URIS"] = ""  # embedded, whatever runs
            if not args.cold_metastore:
                print(f"table registered before the cycle in {prepare_metastore(env):.1f} s")
            profile = f"{args.profile_seal}.{table_format}" if args.profile_seal else ""
            cycles[table_format] = run_cycle(env, total, START + span + timedelta(hours=2), profile=profile)
        base = floor(settings.kafka_bootstrap, topic, ends, home / "floor")
        for table_format, cycle in cycles.items():
            print(f"== output.table_format: {table_format}")
            report(cycle, total, args.hours)
        print(
            f"floor  {base['floor_s']:6.2f} s (consume + parse + write {base['floor_dump_s']:.2f} s, "
            f"compact + checks {base['floor_seal_s']:.2f} s)"
        )
        for table_format, cycle in cycles.items():
            pipeline = cycle["dump_s"] + cycle["seal_s"]
            suffix = "" if len(cycles) == 1 else f" ({table_format})"
            print(f"seal/dump CPU = {cycle['seal_cpu_s'] / cycle['dump_cpu_s']:.2f}{suffix}")
            print(f"seal/dump = {cycle['seal_s'] / cycle['dump_s']:.2f}{suffix}")
            print(f"pipeline/floor = {pipeline / base['floor_s']:.2f}{suffix}")
        if {"hive", "iceberg"} <= set(cycles):
            print(
                f"iceberg/hive = {cycles['iceberg']['seal_s'] / cycles['hive']['seal_s']:.2f} (seal processing)"
            )
    finally:
        for service in reversed(services):
            service.stop()
        shutil.rmtree(home, ignore_errors=True)
        if broker_started_here:
            broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
