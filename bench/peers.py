"""tidemark against the system a data team would run instead, on the same topic, in one sitting.

    .venv/bin/python bench/peers.py [--messages 2000000] [--partitions 4] [--runs 3] [--format json|avro]
        [--systems tidemark,tidemark-iceberg,flink,kc-iceberg] [--metastore embedded|service]

Produces M JSON events (the bench's generator, ~200 B, large producer batches) over one
event-time hour, plus one record per MQ partition past it so the hour seals, to a topic of
Apache Kafka 4.1 (``make jvm``; its own home and ports, PLAINTEXT). Then, alternating, runs
times each:

- **tidemark**: the dump and the seal as the ingest DAG runs them (``spark_jobs/dump.py``, then
  ``spark_jobs/seal.py``, local warehouse and state, its defaults), a fresh table each run;
- **flink**: PyFlink's SQL job of ``bench/peer_jobs/flink_job.py`` (Kafka source, hourly Parquet
  partitions committed with a success file once the watermark passes the hour's end, files
  compacted before the commit, exactly once through checkpoints), in its own venv
  (``~/.cache/tidemark/peers/flink-<version>``, made once from
  ``bench/peer_jobs/flink-requirements.txt``) with the Kafka connector and the Parquet format
  from ``jvm/pom.xml``'s ``flink`` profile.

Per run it prints records/s end to end (the first job's start to the hour visible: tidemark's
partition registered, Flink's success file; the events are all produced before), the CPU
seconds of the whole process tree (sampled from /proc every 0.2 s), and the peak RSS of the
tree; then each system's settings, and last ``tidemark/flink = X.XX``: the median ratio of
records per CPU-second. ``--format avro``: the same events in Avro, Confluent's wire format, their
schema in the Schema Registry stand-in (``tidemark_dev.schema_registry``, written to by
confluent-kafka's serializer and read by both systems' real registry clients): tidemark's
``format: avro`` table, Flink's ``avro-confluent`` format.

- **tidemark-iceberg**: tidemark's dump and seal of the same table with
  ``output.table_format: iceberg`` (the hour committed as one Iceberg snapshot, its default
  SQLite catalog);
- **kc-iceberg**: the Apache Iceberg sink connector in Kafka Connect's standalone worker
  (``bench/peer_jobs/kc_iceberg_job.py``, jars from ``jvm/pom.xml``'s ``kc-iceberg`` profile)
  into an Iceberg table of a JDBC catalog on SQLite, partitioned by ``hour(event_time)``; the
  hour is visible once the table's current snapshot holds every record. JSON only: Kafka
  Connect's Avro converter for Confluent's wire format is Confluent's, not on Maven Central.

tidemark's Hive tables are registered in the metastore service over a Derby database that
``make up`` runs (``--metastore local``, the default); ``--metastore service``: the Thrift
metastore on PostgreSQL, as in production; ``--metastore embedded``: Derby opened by each job.
Each run has its own table, registered before it (as every seal but a table's first finds it).

The ratios last: ``tidemark/flink``, ``tidemark/kc-iceberg`` and the same-format
``tidemark-iceberg/kc-iceberg``, each the median of the runs' records per CPU-second. Not a
test: the figures are for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _formats import encoder, table_changes
from dump_throughput import ROOT, START, bench_table, dump_command, last_json, produce_sealable, run_tree
from pipeline import prepare_metastore, start_local_metastore, start_metastore_service

from tidemark.settings import Settings
from tidemark_dev.kafka import KafkaService
from tidemark_dev.net import free_port_block
from tidemark_dev.schema_registry import SchemaRegistryStandIn

FLINK_VERSION = "2.3.0"  # bench/peer_jobs/flink-requirements.txt and jvm/pom.xml's flink.version
FLINK_SETTINGS: dict[str, str] = {}  # as the job printed them
KC_SETTINGS: dict[str, str] = {}
SYSTEMS = ("tidemark", "tidemark-iceberg", "flink", "kc-iceberg")
RATIOS = (("tidemark", "flink"), ("tidemark", "kc-iceberg"), ("tidemark-iceberg", "kc-iceberg"))
PEERS = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tidemark" / "peers"


@dataclass
class Run:
    system: str
    records: int
    wall_s: float
    processing_s: float  # reading to visible, the processes' starts excluded
    cpu_s: float
    peak_rss_mb: float
    detail: dict[str, Any]

    def line(self) -> str:
        return (
            f"{self.system:9} {self.records / self.processing_s:>9,.0f} rec/s processing ({self.processing_s:6.1f} s), "
            f"{self.records / self.wall_s:>9,.0f} end to end ({self.wall_s:6.1f} s), "
            f"{self.cpu_s:6.1f} CPU-s ({self.records / self.cpu_s:>8,.0f} rec per CPU-s), "
            f"peak RSS {self.peak_rss_mb:,.0f} MB; {self.detail}"
        )


def tidemark_run(
    bootstrap: str,
    topic: str,
    total: int,
    per_partition: int,
    *,
    home: Path,
    source: dict[str, Any],
    table_format: str = "hive",
    table: str = "bench",
    metastore_uris: str = "",
) -> Run:
    """The dump and the seal of a fresh table on the topic (``source``: the format's changes to
    the table's source section); the hour is visible once the seal registered (Hive) or
    committed (Iceberg) it."""
    output = {"table_format": table_format}
    bench_table(home / "conf", topic, per_partition, table, source=source, output=output)
    env = {
        **os.environ,
        "TIDEMARK_HOME": str(home / "run"),
        "TIDEMARK_CONF_DIR": str(home / "conf"),
        "TIDEMARK_KAFKA_BOOTSTRAP": bootstrap,
    }
    env["TIDEMARK_HIVE_METASTORE_URIS"] = metastore_uris  # "": embedded Derby in the run's home
    seal = [sys.executable, str(ROOT / "spark_jobs" / "seal.py"), "--table", table, "--run-id", "seal-1"]
    prepare_metastore(env, table)  # the table registered, as every seal but its first finds it (not measured)
    out, dump_wall, dump_cpu, dump_rss = run_tree(dump_command(START + timedelta(hours=3), table), env)
    dumped = last_json(out)
    if dumped["read"] != total:
        raise SystemExit(f"tidemark's dump read {dumped['read']} records, expected {total}")
    out, seal_wall, seal_cpu, seal_rss = run_tree(seal, env)
    sealed = last_json(out)
    processing = sum(dumped["timings"].values()) - dumped["timings"].get("plan", 0.0)
    processing += seal_wall - sealed["session_start_s"]
    return Run(
        "tidemark" if table_format == "hive" else f"tidemark-{table_format}",
        total,
        dump_wall + seal_wall,
        processing,
        dump_cpu + seal_cpu,
        max(dump_rss, seal_rss),
        {
            "dump_s": round(dump_wall, 1),
            "dump_cpu_s": round(dump_cpu, 1),
            "seal_s": round(seal_wall, 1),
            "seal_cpu_s": round(seal_cpu, 1),
            "seal_session_start_s": round(sealed["session_start_s"], 1),
            "seal_phases": {k: round(v, 2) for k, v in sealed.get("timings", {}).items()},
            "sealed": sealed["sealed"],
        },
    )


def flink_python() -> Path:
    """The PyFlink venv's interpreter, made once from the pinned requirements."""
    venv = PEERS / f"flink-{FLINK_VERSION}"
    python = venv / "bin" / "python"
    if not (venv / ".complete").is_file():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        requirements = ROOT / "bench" / "peer_jobs" / "flink-requirements.txt"
        pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "-r", str(requirements)]
        subprocess.run(pip, check=True)
        (venv / ".complete").touch()
    return python


def jvm_profile(profile: str) -> Path:
    """The jars of one profile of jvm/pom.xml, fetched once."""
    subprocess.run([str(ROOT / "scripts" / "ensure_jvm.sh"), profile], check=True)
    cache = Path(os.environ.get("TIDEMARK_JVM_CACHE", Path.home() / ".cache" / "tidemark" / "jvm"))
    return (cache / profile).resolve()


def flink_jars() -> str:
    return ";".join(f"file://{jar}" for jar in sorted(jvm_profile("flink").glob("*.jar")))


def kc_iceberg_run(jars: Path, bootstrap: str, topic: str, total: int, *, home: Path, tasks: int) -> Run:
    """Kafka Connect's Iceberg sink over the whole topic; the hour is visible once the table's
    current snapshot holds every record."""
    job = ROOT / "bench" / "peer_jobs" / "kc_iceberg_job.py"
    command = [
        sys.executable,
        str(job),
        bootstrap,
        topic,
        str(total),
        str(home / "kc"),
        str(jars),
        str(tasks),
    ]
    out, wall, cpu, rss = run_tree(command, dict(os.environ))
    result = last_json(out)
    KC_SETTINGS.update(result["settings"])
    checked = _kc_table_check(home / "kc")
    return Run(
        "kc-iceberg",
        total,
        wall,
        result["job_wall_s"],
        cpu,
        rss,
        {"job_s": result["job_wall_s"], "snapshots": result["snapshots"], "rows": result["rows"], **checked},
    )


def _kc_table_check(home: Path) -> dict[str, Any]:
    """What the connector wrote, read back by pyiceberg after the run (not measured): the
    rows per event hour and the values it could not convert (left null)."""
    import pyarrow.compute as pc
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog(
        "iceberg", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=f"file://{home / 'warehouse'}"
    )
    rows = catalog.load_table("bench.events").scan(selected_fields=("event_time", "amount")).to_arrow()
    hours = pc.value_counts(pc.strftime(rows["event_time"], format="%Y-%m-%dT%H")).to_pylist()
    return {
        "hours": {h["values"]: h["counts"] for h in hours},
        "null_event_time": rows["event_time"].null_count,
        "null_amount": rows["amount"].null_count,
    }


def flink_run(
    python: Path,
    jars: str,
    bootstrap: str,
    topic: str,
    total: int,
    *,
    home: Path,
    cores: int,
    encoding: list[str],
) -> Run:
    """The Flink job over the whole topic; the hour is visible once its success file is."""
    out_dir = home / "flink-out"
    job = ROOT / "bench" / "peer_jobs" / "flink_job.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PYSPARK"))}
    env["_python_worker_execution_mode"] = "process"  # SQL only: no loopback server for Python UDFs
    out, wall, cpu, rss = run_tree(
        [str(python), str(job), bootstrap, topic, str(out_dir), jars, str(cores), *encoding], env
    )
    result = last_json(out)
    jars_used = [Path(j).name for j in result["settings"].pop("pipeline.jars").split(";")]
    result["settings"]["pipeline.jars"] = ", ".join(jars_used)
    committed = sorted(str(p.parent.relative_to(out_dir)) for p in out_dir.rglob("_SUCCESS"))
    rows = _parquet_rows(out_dir)
    FLINK_SETTINGS.update(result["settings"])
    return Run(
        "flink",
        total,
        wall,
        result["job_wall_s"],
        cpu,
        rss,
        {"job_s": result["job_wall_s"], "committed": committed, "rows": rows},
    )


def _parquet_rows(directory: Path) -> int:
    import pyarrow.parquet as pq

    files = [p for p in directory.rglob("*") if p.is_file() and not p.name.startswith((".", "_"))]
    return sum(pq.ParquetFile(p).metadata.num_rows for p in files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}"
    )
    parser.add_argument("--format", choices=("json", "avro"), default="json")
    parser.add_argument(
        "--metastore",
        choices=("local", "embedded", "service"),
        default="local",
        help="tidemark's Hive tables: local, the metastore service over a Derby database (what make up "
        "runs); embedded, Derby in each job; service, the metastore on PostgreSQL",
    )
    args = parser.parse_args(argv)
    systems = [s for s in args.systems.split(",") if s]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"unknown systems {sorted(unknown)}")
    if args.format == "avro" and "kc-iceberg" in systems:
        print(
            "kc-iceberg: not run on Avro (Kafka Connect's converter for Confluent's wire format is not on Maven Central)"
        )
        systems.remove("kc-iceberg")

    cores = os.cpu_count() or 2
    parallelism = min(cores, args.partitions)
    python = flink_python() if "flink" in systems else None
    flink = flink_jars() if "flink" in systems else ""
    connect = jvm_profile("kc-iceberg") if "kc-iceberg" in systems else None
    settings = Settings.from_env()
    scratch = Path(tempfile.mkdtemp(prefix="tidemark-bench-peers-"))
    kafka = KafkaService(
        replace(settings, home=scratch / "kafka", kafka_bootstrap=f"127.0.0.1:{free_port_block(4)}")
    )
    kafka.start()
    registry = SchemaRegistryStandIn().start() if args.format == "avro" else None
    services: list[Any] = []
    try:
        metastore_uris = ""
        metastore_home = {**os.environ, "TIDEMARK_HOME": str(scratch / "metastore")}
        if args.metastore == "service":
            metastore_uris = start_metastore_service(metastore_home, services)
        elif args.metastore == "local":  # one database for every run's table, as make up's
            metastore_uris = start_local_metastore(metastore_home, services)
        bootstrap = kafka.listeners.plaintext
        topic = f"bench_{uuid.uuid4().hex[:8]}"
        encode, source, encoding = None, {}, ["json"]
        if registry is not None:
            encode = encoder("avro", registry.url, topic)
            source, encoding = table_changes("avro", registry.url), ["avro", registry.url]
        ends, value_bytes = produce_sealable(bootstrap, topic, args.messages, args.partitions, encode=encode)
        total = sum(ends.values())
        per_partition = max(ends.values())
        print(
            f"{total:,} events ({value_bytes / 1e6:.0f} MB, {args.format}) to {topic} on Apache Kafka; "
            f"offsets {ends}",
            flush=True,
        )
        runs: dict[str, list[Run]] = {system: [] for system in systems}
        for i in range(args.runs):
            for system in systems if i % 2 == 0 else reversed(systems):
                home = scratch / f"{system}-{i}"
                if system.startswith("tidemark"):
                    table_format = system.removeprefix("tidemark").removeprefix("-") or "hive"
                    run = tidemark_run(
                        bootstrap,
                        topic,
                        total,
                        per_partition,
                        home=home,
                        source=source,
                        table_format=table_format,
                        table=f"bench_{i}",  # one metastore service serves every run
                        metastore_uris=metastore_uris,
                    )
                elif system == "flink":
                    assert python is not None
                    run = flink_run(
                        python,
                        flink,
                        bootstrap,
                        topic,
                        total,
                        home=home,
                        cores=parallelism,
                        encoding=encoding,
                    )
                else:
                    assert connect is not None
                    run = kc_iceberg_run(connect, bootstrap, topic, total, home=home, tasks=parallelism)
                runs[system].append(run)
                print(run.line(), flush=True)
                shutil.rmtree(home, ignore_errors=True)
        print(
            f"tidemark settings: conf/tables/events.yaml's defaults, source {source or 'json'}; "
            f"local[*] Spark, {args.metastore} metastore; tidemark-iceberg: output.table_format iceberg, SQLite catalog"
        )
        if FLINK_SETTINGS:
            print(
                f"flink settings: {FLINK_SETTINGS}; PyFlink {FLINK_VERSION}, local MiniCluster; SQL of bench/peer_jobs/"
            )
        if KC_SETTINGS:
            print(f"kc-iceberg settings: {KC_SETTINGS}; Kafka Connect {kafka_version()}, standalone worker")
        for mine, peer in RATIOS:
            if runs.get(mine) and runs.get(peer):
                per_cpu = [
                    (a.records / a.cpu_s) / (b.records / b.cpu_s)
                    for a, b in zip(runs[mine], runs[peer], strict=True)
                ]
                print(
                    f"{mine}/{peer} = {statistics.median(per_cpu):.2f} "
                    f"(records per CPU-second; runs: {', '.join(f'{r:.2f}' for r in per_cpu)})"
                )
        return 0
    finally:
        for service in reversed(services):
            service.stop()
        if registry is not None:
            registry.stop()
        kafka.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def kafka_version() -> str:
    """Kafka Connect's release: the connect-runtime jar's version in the profile."""
    jars = sorted(jvm_profile("kc-iceberg").glob("connect-runtime-*.jar"))
    return jars[0].stem.removeprefix("connect-runtime-") if jars else "?"


if __name__ == "__main__":
    raise SystemExit(main())
