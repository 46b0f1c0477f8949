"""Dump throughput against plain single-process baselines, in one sitting.

    .venv/bin/python bench/dump_throughput.py [--messages 2000000] [--partitions 4] [--format json|avro|protobuf]

Produces M JSON events of ~200 B to a fresh topic of the local broker (started if needed),
then runs, each in its own process and over exactly the same offset ranges:

(a) the dump job (``spark_jobs/dump.py``, as spark-submit runs it): Spark session start and
    the processing (first read to commit record) are reported apart, with the time of each
    phase of the exactly-once protocol;
(b) baseline: one confluent-kafka consumer + pyarrow JSON parse + pyarrow Parquet write;
(c) consume only: the same consumer, nothing else.

Prints records/s, MB/s (message values) and peak RSS (whole process tree) of each, and the
ratios a/b and a/c on processing throughput. Not a test: the figures are for docs/benchmarks.md.

With ``--format avro`` or ``protobuf`` the same events are produced twice, as JSON and in the
Confluent wire format (the real serializers against the Schema Registry stand-in): (a) dumps the
binary topic, (b) decodes it with the same library as tidemark (fastavro, the protobuf runtime)
and writes Parquet, (c) consumes it, and (j) dumps the JSON topic; the last line is
``<format>/json = X.XX``, the binary dump's records/s against the JSON dump's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import yaml
from _formats import baseline_decoder, encoder, table_changes

from tidemark.settings import Settings
from tidemark_dev.generator import Message, create_topic, events, produce, records
from tidemark_dev.schema_registry import SchemaRegistryStandIn
from tidemark_dev.services import TansuService

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
PROCESSING = START + timedelta(hours=2)
CHUNK = 100_000  # records per pyarrow parse/write in the baseline


@dataclass
class Measured:
    name: str
    records: int
    value_bytes: int
    wall_s: float
    processing_s: float
    peak_rss_mb: float
    detail: dict[str, Any]

    def line(self) -> str:
        rate = self.records / self.processing_s
        mb = self.value_bytes / self.processing_s / 1e6
        e2e = self.records / self.wall_s
        return (
            f"{self.name:<14} processing {self.processing_s:7.2f} s  {rate:>9,.0f} rec/s  {mb:6.1f} MB/s | "
            f"end to end {self.wall_s:7.2f} s  {e2e:>9,.0f} rec/s | peak RSS {self.peak_rss_mb:7.0f} MB"
        )


def run_tree(
    command: list[str], env: dict[str, str], *, errors: list[str] | None = None
) -> tuple[str, float, float, float]:
    """Run ``command``; return its stdout, wall seconds, the CPU seconds of its process tree
    (each process's last sample, every 0.2 s, or what the reaped tree's resource usage says,
    whichever is more: a sample misses a process's last 0.2 s, the usage the processes nobody
    reaped) and the tree's peak RSS in MB (``errors``: gets its stderr)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cpu: dict[tuple[int, float], float] = {}
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            rss = 0
            for p in tree:
                # a child may exit between listing and reading
                with contextlib.suppress(psutil.Error), p.oneshot():
                    times = p.cpu_times()
                    cpu[(p.pid, p.create_time())] = times.user + times.system
                    rss += p.memory_info().rss
            peak = max(peak, rss)
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    if errors is not None:
        errors.append(err)
    done.set()
    sampler.join()
    if proc.returncode != 0:
        sys.stderr.write(err[-6000:])
        raise SystemExit(f"{command[:3]} failed with exit code {proc.returncode}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return out, wall, max(sum(cpu.values()), reaped), peak / 1e6


def last_json(out: str) -> dict[str, Any]:
    """A job's result: the last line of its stdout that is a JSON object."""
    result: dict[str, Any] = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    return result


def run_measured(command: list[str], env: dict[str, str]) -> tuple[dict[str, Any], float, float]:
    """Run ``command``; return its last stdout JSON line, wall seconds and peak tree RSS (MB)."""
    out, wall, _, peak_mb = run_tree(command, env)
    return last_json(out), wall, peak_mb


# -- workers (run in their own process) ------------------------------------------------------
def _consume(bootstrap: str, topic: str, ends: dict[int, int], on_batch: Any) -> tuple[int, int]:
    """Read [0, end) of each partition with assign(); hand value lists to ``on_batch``."""
    from confluent_kafka import Consumer, TopicPartition

    from tidemark.ingest.reader import READER_SETTINGS

    consumer = Consumer({**READER_SETTINGS, "bootstrap.servers": bootstrap, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    remaining = {p: e for p, e in ends.items() if e > 0}
    records = value_bytes = 0
    try:
        while remaining:
            batch = consumer.consume(num_messages=10_000, timeout=1.0)
            # Whole-batch comprehensions, as the dump's reader does (a per-message loop costs
            # about 2 us a message): the baselines get the same care.
            errors = [m.error() for m in batch if m.error() is not None]
            if errors:
                raise RuntimeError(str(errors[0]))
            coordinates = [(m.partition(), m.offset()) for m in batch]
            values = [m.value() for m, (p, o) in zip(batch, coordinates, strict=True) if o < ends[p]]
            for p in {p for p, _ in coordinates}:
                if max(o for q, o in coordinates if q == p) + 1 >= ends[p]:
                    remaining.pop(p, None)
            value_bytes += sum(map(len, values))
            records += len(values)
            on_batch(values)
    finally:
        consumer.close()
    return records, value_bytes


def worker_consume(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[str, Any]:
    started = time.perf_counter()
    records, value_bytes = _consume(bootstrap, topic, ends, lambda values: None)
    return {"records": records, "value_bytes": value_bytes, "processing_s": time.perf_counter() - started}


def worker_binary(
    bootstrap: str, topic: str, ends: dict[int, int], out_dir: str, *, fmt: str, registry: str
) -> dict[str, Any]:
    """The binary baseline: consume + the format's library decode + one Parquet write per chunk."""
    import pyarrow.parquet as pq

    decode = baseline_decoder(fmt, registry)
    pending: list[bytes] = []
    writer: Any = None

    def flush() -> None:
        nonlocal writer
        if pending:
            table = decode(pending)
            writer = writer or pq.ParquetWriter(str(Path(out_dir) / "part-0.parquet"), table.schema)
            writer.write_table(table)
            pending.clear()

    def on_batch(values: list[bytes]) -> None:
        pending.extend(values)
        if len(pending) >= CHUNK:
            flush()

    started = time.perf_counter()
    records, value_bytes = _consume(bootstrap, topic, ends, on_batch)
    flush()
    if writer is not None:
        writer.close()
    return {"records": records, "value_bytes": value_bytes, "processing_s": time.perf_counter() - started}


def event_schema() -> Any:
    """The events table's schema in Arrow, as the baselines parse and write it."""
    import pyarrow as pa

    return pa.schema(
        [
            ("event_id", pa.string()),
            ("user_id", pa.int64()),
            ("app", pa.string()),
            ("event_type", pa.string()),
            ("amount", pa.decimal128(12, 2)),
            ("event_time", pa.timestamp("us", tz="UTC")),
        ]
    )


def worker_pyarrow(bootstrap: str, topic: str, ends: dict[int, int], out_dir: str) -> dict[str, Any]:
    import pyarrow.json as pa_json
    import pyarrow.parquet as pq

    schema = event_schema()
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    writer = pq.ParquetWriter(str(Path(out_dir) / "part-0.parquet"), schema)
    pending: list[bytes] = []

    def flush() -> None:
        if pending:
            writer.write_table(pa_json.read_json(io.BytesIO(b"\n".join(pending)), parse_options=options))
            pending.clear()

    def on_batch(values: list[bytes]) -> None:
        pending.extend(values)
        if len(pending) >= CHUNK:
            flush()

    started = time.perf_counter()
    records, value_bytes = _consume(bootstrap, topic, ends, on_batch)
    flush()
    writer.close()
    return {"records": records, "value_bytes": value_bytes, "processing_s": time.perf_counter() - started}


# -- the sitting -------------------------------------------------------------------------------
def produce_input(
    bootstrap: str,
    topic: str,
    messages: int,
    partitions: int,
    encode: Any = None,
    *,
    span: timedelta = timedelta(hours=1),
) -> tuple[dict[int, int], int]:
    """Produce the events (over ``span`` from START) batched, then one lone message per
    partition, so that tansu's high watermark (base offset of the last batch + 1, see
    STACK.md) covers every event; ``encode`` turns each JSON value into another format's."""

    def padded() -> Iterator[Message]:  # + a page field (not in the schema): ~200 B per event
        for i, m in enumerate(events(messages, start=START, partitions=partitions, span=span)):
            page = b', "page": "/catalog/item/%07d?utm_source=newsletter&utm_campaign=w"}' % i
            value = m.value[:-1] + page
            yield replace(m, value=encode(value) if encode else value)

    create_topic(bootstrap, topic, partitions)
    # Large producer batches, as a production producer sends them: tansu's fetch cost grows with
    # the number of record batches it holds (consume-only ran at 28k rec/s on 2M one-ms batches).
    big_batches = {"linger.ms": 200, "batch.size": 4 * 1024 * 1024, "batch.num.messages": 100_000}
    delivered = produce(bootstrap, topic, padded(), one_per_request=False, producer_conf=big_batches)
    lone = records([(p, START + span - timedelta(minutes=1)) for p in range(partitions)])
    tail = produce(bootstrap, topic, [replace(m, value=encode(m.value)) for m in lone] if encode else lone)
    ends: dict[int, int] = {}
    value_bytes = 0
    for p, o, m in delivered + tail:
        ends[p] = max(ends.get(p, 0), o + 1)
        value_bytes += len(m.value)
    return ends, value_bytes


def produce_sealable(
    bootstrap: str,
    topic: str,
    messages: int,
    partitions: int,
    *,
    span: timedelta = timedelta(hours=1),
    encode: Any = None,
) -> tuple[dict[int, int], int]:
    """``produce_input``, then one record per partition 80 minutes past the last hour, so every
    watermark passes the last hour's end and its commit delay: every hour of the events seals."""

    ends, value_bytes = produce_input(bootstrap, topic, messages, partitions, encode, span=span)
    tail = START + span + timedelta(minutes=80)
    last = records([(p, tail) for p in range(partitions)], prefix="tail")
    if encode:
        last = [replace(m, value=encode(m.value)) for m in last]
    for p, o, _ in produce(bootstrap, topic, last):
        ends[p] = max(ends[p], o + 1)
    return ends, value_bytes


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
        }
    finally:
        consumer.close()


def dump_command(processing: datetime, table: str = "bench") -> list[str]:
    """The dump job of a bench table, as spark-submit runs it, for run id bench-1."""
    return [
        sys.executable,
        str(ROOT / "spark_jobs" / "dump.py"),
        "--table",
        table,
        "--run-id",
        "bench-1",
        "--processing-time",
        processing.isoformat(),
    ]


def bench_table(
    conf_dir: Path,
    topic: str,
    per_partition: int,
    table: str = "bench",
    source: dict[str, Any] | None = None,
    *,
    output: dict[str, Any] | None = None,
) -> None:
    data = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    data["table"] = table
    data["source"]["topic"] = topic
    data["source"]["max_records_per_partition"] = per_partition
    data["source"].update(source or {})
    data.setdefault("output", {}).update(output or {})
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / f"{table}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--reuse-topic", metavar="TOPIC", help="skip producing: read this earlier bench topic"
    )
    parser.add_argument("--format", choices=["json", "avro", "protobuf"], default="json")
    parser.add_argument("--worker", choices=["consume", "pyarrow", "binary"], help=argparse.SUPPRESS)
    parser.add_argument("--registry", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--ends", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    if args.worker:
        ends = {int(k): v for k, v in json.loads(args.ends).items()}
        if args.worker == "consume":
            result = worker_consume(settings.kafka_bootstrap, args.topic, ends)
        elif args.worker == "binary":
            result = worker_binary(
                settings.kafka_bootstrap, args.topic, ends, args.out, fmt=args.format, registry=args.registry
            )
        else:
            result = worker_pyarrow(settings.kafka_bootstrap, args.topic, ends, args.out)
        print(json.dumps(result))
        return 0

    broker = TansuService(settings)
    started_here = not broker.status().running
    broker.start()
    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    try:
        if args.format != "json":
            return binary_sitting(args, settings, home)
        t0 = time.perf_counter()
        if args.reuse_topic:
            topic = args.reuse_topic
            ends = end_offsets(settings.kafka_bootstrap, topic)
            value_bytes = 0  # counted by the consume run below
        else:
            topic = f"bench_{uuid.uuid4().hex[:8]}"
            ends, value_bytes = produce_input(settings.kafka_bootstrap, topic, args.messages, args.partitions)
        total = sum(ends.values())
        print(
            f"{'reused' if args.reuse_topic else 'produced'} {total:,} messages to {topic} "
            f"in {time.perf_counter() - t0:.1f} s; offsets {ends}",
            flush=True,
        )
        bench_table(home / "conf", topic, max(ends.values()))
        env = {
            **os.environ,
            "TIDEMARK_HOME": str(home),
            "TIDEMARK_CONF_DIR": str(home / "conf"),
            "TIDEMARK_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        }
        py = sys.executable
        worker = [py, __file__, "--topic", topic, "--ends", json.dumps(ends)]

        out, wall, rss = run_measured([*worker, "--worker", "consume"], env)
        consume = Measured(
            "c consume", out["records"], out["value_bytes"], wall, out["processing_s"], rss, {}
        )
        value_bytes = out["value_bytes"]
        print(f"average message value {value_bytes / total:.0f} B", flush=True)
        print(consume.line(), flush=True)

        (home / "pyarrow").mkdir()
        out, wall, rss = run_measured([*worker, "--worker", "pyarrow", "--out", str(home / "pyarrow")], env)
        baseline = Measured(
            "b pyarrow", out["records"], out["value_bytes"], wall, out["processing_s"], rss, {}
        )
        print(baseline.line(), flush=True)

        out, wall, rss = run_measured(dump_command(PROCESSING), env)
        if out["read"] != total:
            raise SystemExit(f"dump read {out['read']} records, expected {total}")
        t = out["timings"]
        processing = sum(t[k] for k in ("read_stage", "reconcile", "publish", "commit"))
        dump = Measured("a dump", out["read"], value_bytes, wall, processing, rss, t)
        print(dump.line(), flush=True)
        batch = sum(t.values())
        overhead = sum(t.get(k, 0.0) for k in ("plan", "rollback", "reconcile", "commit"))
        print(
            f"\ndump: Spark session start {out['session_start_s']:.1f} s; phases (s) {t}\n"
            f"exactly-once overhead (plan + rollback + reconcile + commit): {overhead:.2f} s = "
            f"{overhead / batch:.1%} of the batch's {batch:.1f} s (publish {t.get('publish', 0):.2f} s more)"
        )
        rate = {m.name: m.records / m.processing_s for m in (dump, baseline, consume)}
        print(
            f"processing throughput ratios: a/b = {rate['a dump'] / rate['b pyarrow']:.2f}, "
            f"a/c = {rate['a dump'] / rate['c consume']:.2f}"
        )
        print(
            f"machine: {platform.node()}, {os.cpu_count()} cores, "
            f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}, "
            f"{datetime.now(UTC):%Y-%m-%d}"
        )
        return 0
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if started_here:
            broker.stop()


def binary_sitting(args: argparse.Namespace, settings: Any, home: Path) -> int:
    """``--format avro|protobuf``: the same events as JSON and in the binary format, in one
    sitting; the binary dump against its library baseline, its consume, and the JSON dump."""

    registry = SchemaRegistryStandIn().start()
    try:
        fmt, bootstrap = args.format, settings.kafka_bootstrap
        suffix = uuid.uuid4().hex[:8]
        json_topic, binary_topic = f"bench_json_{suffix}", f"bench_{fmt}_{suffix}"
        t0 = time.perf_counter()
        json_ends, json_bytes = produce_input(bootstrap, json_topic, args.messages, args.partitions)
        ends, value_bytes = produce_input(
            bootstrap, binary_topic, args.messages, args.partitions, encoder(fmt, registry.url, binary_topic)
        )
        total = sum(ends.values())
        print(
            f"produced {total:,} events as JSON and as {fmt} in {time.perf_counter() - t0:.1f} s", flush=True
        )
        bench_table(
            home / "conf", binary_topic, max(ends.values()), "bench", table_changes(fmt, registry.url)
        )
        bench_table(home / "conf", json_topic, max(json_ends.values()), "bench_json")
        env = {
            **os.environ,
            "TIDEMARK_HOME": str(home),
            "TIDEMARK_CONF_DIR": str(home / "conf"),
            "TIDEMARK_KAFKA_BOOTSTRAP": bootstrap,
        }
        worker = [
            sys.executable,
            __file__,
            "--topic",
            binary_topic,
            "--ends",
            json.dumps(ends),
            "--format",
            fmt,
        ]
        out, wall, rss = run_measured([*worker, "--worker", "consume"], env)
        consume = Measured(
            "c consume", out["records"], out["value_bytes"], wall, out["processing_s"], rss, {}
        )
        print(f"average {fmt} message value {out['value_bytes'] / total:.0f} B", flush=True)
        print(consume.line(), flush=True)
        (home / "baseline").mkdir()
        baseline_args = ["--worker", "binary", "--out", str(home / "baseline"), "--registry", registry.url]
        out, wall, rss = run_measured([*worker, *baseline_args], env)
        baseline = Measured(
            f"b {fmt} lib", out["records"], out["value_bytes"], wall, out["processing_s"], rss, {}
        )
        print(baseline.line(), flush=True)
        measured = {}
        for name, table, size in (
            (f"a dump {fmt}", "bench", value_bytes),
            ("j dump json", "bench_json", json_bytes),
        ):
            out, wall, rss = run_measured(dump_command(PROCESSING, table), env)
            t = out["timings"]
            processing = sum(t[k] for k in ("read_stage", "reconcile", "publish", "commit"))
            measured[name] = Measured(name, out["read"], size, wall, processing, rss, t)
            print(measured[name].line(), flush=True)
        rate = {m.name: m.records / m.processing_s for m in (*measured.values(), baseline, consume)}
        dump = rate[f"a dump {fmt}"]
        print(
            f"processing throughput ratios: a/b = {dump / rate[baseline.name]:.2f}, a/c = {dump / rate['c consume']:.2f}"
        )
        print(
            f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, {datetime.now(UTC):%Y-%m-%d}"
        )
        print(f"{fmt}/json = {dump / rate['j dump json']:.2f}")
        return 0
    finally:
        registry.stop()


if __name__ == "__main__":
    sys.exit(main())
