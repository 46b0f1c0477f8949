"""The dump on Apache Kafka against the dump on tansu: the same events, the same table, one sitting.

    .venv/bin/python bench/brokers.py [--messages 1000000] [--partitions 4] [--runs 3]

Produces the bench's M JSON events (~200 B, large producer batches) to a topic of each broker:
tansu (the fast embedded default, started if needed) and Apache Kafka 4.1 (``make jvm``; its
own home and ports, PLAINTEXT listener). Then runs the dump job (``spark_jobs/dump.py`` as
spark-submit runs it, a fresh table each time) against each, alternating, ``--runs`` times.
Prints each run's processing records/s (first read to commit record) and end to end, and last
``kafka/tansu = X.XX``: the median ratio of processing records/s. Not a test: the figures are
for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump_throughput import PROCESSING, Measured, bench_table, dump_command, produce_input, run_measured

from tidemark.settings import Settings
from tidemark_dev.kafka import KafkaService
from tidemark_dev.net import free_port_block
from tidemark_dev.services import TansuService


def dump_once(bootstrap: str, topic: str, ends: dict[int, int], value_bytes: int, name: str) -> Measured:
    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-brokers-"))
    try:
        bench_table(home / "conf", topic, max(ends.values()))
        env = {
            **os.environ,
            "TIDEMARK_HOME": str(home),
            "TIDEMARK_CONF_DIR": str(home / "conf"),
            "TIDEMARK_KAFKA_BOOTSTRAP": bootstrap,
        }
        out, wall, rss = run_measured(dump_command(PROCESSING), env)
        total = sum(ends.values())
        if out["read"] != total:
            raise SystemExit(f"{name}: the dump read {out['read']} records, expected {total}")
        t = out["timings"]
        processing = sum(t[k] for k in ("read_stage", "reconcile", "publish", "commit"))
        return Measured(name, out["read"], value_bytes, wall, processing, rss, t)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    tansu = TansuService(settings)
    tansu_here = not tansu.status().running
    tansu.start()
    kafka_home = Path(tempfile.mkdtemp(prefix="tidemark-bench-kafka-"))
    kafka = KafkaService(
        replace(settings, home=kafka_home, kafka_bootstrap=f"127.0.0.1:{free_port_block(4)}")
    )
    kafka.start()
    try:
        brokers = {"tansu": settings.kafka_bootstrap, "kafka": kafka.listeners.plaintext}
        topic = f"bench_{uuid.uuid4().hex[:8]}"
        inputs = {
            name: produce_input(bootstrap, topic, args.messages, args.partitions)
            for name, bootstrap in brokers.items()
        }
        print(f"{args.messages:,} events to {topic} on each broker; offsets {inputs['kafka'][0]}", flush=True)
        print(f"kafka settings: {kafka.properties_file.read_text().splitlines()[:12]}", flush=True)
        rates: dict[str, list[float]] = {name: [] for name in brokers}
        for run in range(args.runs):
            for name in brokers if run % 2 == 0 else reversed(list(brokers)):
                ends, value_bytes = inputs[name]
                measured = dump_once(brokers[name], topic, ends, value_bytes, f"{name} #{run + 1}")
                rates[name].append(measured.records / measured.processing_s)
                print(measured.line(), flush=True)
        ratios = [k / t for k, t in zip(rates["kafka"], rates["tansu"], strict=True)]
        print(
            f"kafka/tansu = {statistics.median(ratios):.2f} (runs: {', '.join(f'{r:.2f}' for r in ratios)})"
        )
        return 0
    finally:
        kafka.stop()
        shutil.rmtree(kafka_home, ignore_errors=True)
        if tansu_here:
            tansu.stop()


if __name__ == "__main__":
    raise SystemExit(main())
