"""The continuous writer against the batch dump: throughput and freshness, in one sitting.

    .venv/bin/python bench/stream.py [--messages 400000] [--partitions 4] [--watch 150]

(1) Throughput over the same records (produced like bench/dump_throughput.py, ~200 B each):
    (a) the dump job reading them in one batch; (b) the stream (``spark_jobs/stream.py
    --until-caught-up``) draining them as a backlog in micro-batches capped at a quarter of each
    MQ partition. Each in its own process and home; processing = wall - Spark session start.
(2) Freshness of the stream: a producer sends one record per MQ partition every 0.5 s with the
    stream's own clock as event time (``--clock-from``: the clock starts a minute before an
    hour's end, so the hour ends during the run); the table has ``max_out_of_orderness: 10s``,
    ``commit_delay: 30s``, ``trigger_interval`` as configured (10 s by default). Measured:
    produce -> committed (the commit record covers the record's offset: counted, in the
    table's files) and hour end -> registered (the journal's seal entry, polled), in wall time.
(3) The batch DAG's freshness with the same job costs: the dump and seal jobs of the same table
    are timed, and a schedule of S (default ``*/10``: S = 600 s) adds U(0, S) of waiting:
    produce -> committed = U(0, S) + dump; hour end (+ delay + out-of-orderness) -> registered
    = U(0, S) + dump + seal.

Prints the figures; they go to docs/benchmarks.md. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump_throughput import PROCESSING, ROOT, produce_input, run_measured

from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.mode import TableWriter
from tidemark_dev.generator import create_topic
from tidemark_dev.services import TansuService

HOUR_END = datetime(2026, 11, 22, 13, tzinfo=UTC)
SCHEDULE_S = 600.0


def table_yaml(conf_dir: Path, table: str, topic: str, **overrides: Any) -> None:
    data = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    data["table"] = table
    data["source"]["topic"] = topic
    for dotted, value in overrides.items():
        target = data
        *parents, last = dotted.split("__")
        for key in parents:
            target = target.setdefault(key, {})
        target[last] = value
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / f"{table}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def job(table: str, name: str, run_id: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "spark_jobs" / f"{name}.py"),
        "--table",
        table,
        "--run-id",
        run_id,
        *extra,
    ]


def environment(home: Path, bootstrap: str, store: dict[str, str] | None = None) -> dict[str, str]:
    """A run's settings; ``store``: where the warehouse and state are, if not under ``home``
    (``TIDEMARK_WAREHOUSE``, ``TIDEMARK_STATE_DIR`` and the ``AWS_*`` of an S3 server)."""
    return {
        **os.environ,
        "TIDEMARK_HOME": str(home),
        "TIDEMARK_CONF_DIR": str(home / "conf"),
        "TIDEMARK_KAFKA_BOOTSTRAP": bootstrap,
        **(store or {}),
    }


def switch_to_stream(home: Path, bootstrap: str, table: str, store: dict[str, str] | None = None) -> None:
    os.environ.update({k: v for k, v in (store or {}).items() if k.startswith("AWS_")})  # boto3's
    settings = Settings.from_env(environment(home, bootstrap, store))
    TableWriter(settings.state_location, table).switch("stream", by="bench", reason="bench", at="bench")


def throughput(bootstrap: str, messages: int, partitions: int, scratch: Path) -> None:
    topic = f"bench_{uuid.uuid4().hex[:8]}"
    ends, _ = produce_input(bootstrap, topic, messages, partitions)
    total = sum(ends.values())
    cap = max(ends.values()) // 4 + 1
    print(f"(1) throughput: {total:,} records in {topic}, offsets {ends}", flush=True)
    results = {}
    for name in ("dump", "stream"):
        home = scratch / f"throughput-{name}"
        table_yaml(  # a commit delay of 2 h: no hour seals during the run, both only ingest
            home / "conf",
            "bench",
            topic,
            source__max_records_per_partition=cap if name == "stream" else total,
            watermark__commit_delay="2h",
        )
        env = environment(home, bootstrap)
        if name == "dump":
            command = job("bench", "dump", "bench-1", "--processing-time", PROCESSING.isoformat())
        else:
            switch_to_stream(home, bootstrap, "bench")
            command = job(
                "bench", "stream", "bench-s", "--until-caught-up", "--trigger-interval", "1s",
                "--clock-from", PROCESSING.isoformat(),
            )  # fmt: skip
        out, wall, rss = run_measured(command, env)
        processing = wall - out["session_start_s"]
        read = out["read"] if name == "dump" else out["records"]
        assert read == total, (name, read, total)
        batches = 1 if name == "dump" else out["batches"]
        results[name] = total / processing
        # read to commit: the dump's phases; the stream's micro-batch dumps (no query start)
        busy = sum(out["timings"].values()) if name == "dump" else out["dump_s"]
        seals = "" if name == "dump" else f" (seals {out['seal_s']:.1f} s)"
        print(
            f"  {name:<6} {batches} batch(es), wall {wall:6.1f} s, session {out['session_start_s']:4.1f} s, "
            f"processing {processing:6.1f} s = {total / processing:>9,.0f} rec/s; in batches {busy:5.1f} s = "
            f"{total / busy:>9,.0f} rec/s{seals}; "
            f"peak RSS {rss:5.0f} MB",
            flush=True,
        )
    print(f"  stream / dump processing throughput: {results['stream'] / results['dump']:.2f}", flush=True)


def clock_offset(home: Path, table: str, stream: subprocess.Popen[bytes]) -> float:
    """The stream's clock minus the wall clock, once its session is up and its query started
    (its first heartbeat)."""
    status_file = home / "state" / table / "stream" / "status.json"
    while not status_file.exists():
        if stream.poll() is not None:
            raise SystemExit(f"the stream exited; see {home / 'stream.log'}")
        time.sleep(0.2)
    status = json.loads(status_file.read_text())
    return float(datetime.fromisoformat(status["heartbeat_at"]).timestamp() - time.time())


def produce_steadily(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    offset: float,
    produced: dict[tuple[int, int], float],
    stop: threading.Event,
) -> None:
    """One record per MQ partition every 0.5 s until ``stop``, its event time the stream's
    clock (the wall clock + ``offset``); ``produced``: (partition, offset) -> when it was sent."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    i = 0
    while not stop.is_set():
        event_time = datetime.fromtimestamp(time.time() + offset, UTC)
        for p in range(partitions):
            value = json.dumps(
                {"event_id": f"f{i}-{p}", "user_id": i, "app": "web", "event_type": "view",
                 "amount": "1.00", "event_time": event_time.isoformat()}
            ).encode()  # fmt: skip
            sent = time.time()

            def delivered(err: Any, msg: Any, sent: float = sent) -> None:
                if err is None:
                    produced[(msg.partition(), msg.offset())] = sent

            producer.produce(topic, value, partition=p, on_delivery=delivered)
        producer.flush()
        i += 1
        stop.wait(0.5)


def freshness(
    bootstrap: str, partitions: int, watch_s: float, scratch: Path, interval: str
) -> dict[str, float]:
    home = scratch / f"freshness-{interval}"
    topic = f"fresh_{uuid.uuid4().hex[:8]}"
    table_yaml(
        home / "conf",
        "fresh",
        topic,
        watermark__max_out_of_orderness="10s",
        watermark__commit_delay="30s",
        stream__trigger_interval=interval,
    )
    create_topic(bootstrap, topic, partitions)
    env = environment(home, bootstrap)
    settings = Settings.from_env(env)
    switch_to_stream(home, bootstrap, "fresh")
    clock_from = HOUR_END - timedelta(seconds=60)
    log_file = (home / "stream.log").open("w")
    stream = subprocess.Popen(
        job("fresh", "stream", "bench-fresh", "--clock-from", clock_from.isoformat()),
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    commit_log = CommitLog(settings.state_location, "fresh")
    journal = HourJournal(settings.state_location, "fresh")
    produced: dict[tuple[int, int], float] = {}
    committed: dict[tuple[int, int], float] = {}
    registered_at: float | None = None
    stop = threading.Event()
    offset = clock_offset(home, "fresh", stream)
    hour_end_wall = HOUR_END.timestamp() - offset
    hour_key = (HOUR_END - timedelta(hours=1)).strftime("%Y-%m-%dT%H")

    producer = threading.Thread(
        target=produce_steadily,
        args=(bootstrap, topic, partitions),
        kwargs={"offset": offset, "produced": produced, "stop": stop},
        daemon=True,
    )
    producer.start()
    deadline = time.time() + watch_s
    try:
        while time.time() < deadline:
            ends = commit_log.state().end_offsets
            now = time.time()
            for key in [k for k in produced if k not in committed and k[1] < ends.get(k[0], 0)]:
                committed[key] = now
            if registered_at is None and any(
                h == hour_key and e.published for h, e in journal.state().hours.items()
            ):
                registered_at = now
            if stream.poll() is not None:
                raise SystemExit(f"the stream exited; see {home / 'stream.log'}")
            time.sleep(0.25)
    finally:
        stop.set()
        producer.join()

        TableWriter(settings.state_location, "fresh").switch("batch", by="bench", reason="done", at="bench")
        stream.wait(timeout=120)
        log_file.close()
    lags = sorted(committed[k] - produced[k] for k in committed) or [float("nan")]
    result = {
        "records": float(len(lags)),
        "commit_p50": statistics.median(lags),
        "commit_p95": lags[int(len(lags) * 0.95)],
        "commit_max": lags[-1],
        "registered_after_hour_end": (registered_at - hour_end_wall) if registered_at else float("nan"),
    }
    print(
        f"(2) stream, trigger {interval}: {len(lags)} records committed; produce -> committed p50 "
        f"{result['commit_p50']:.1f} s, p95 {result['commit_p95']:.1f} s, max {result['commit_max']:.1f} s; "
        f"hour end -> registered {result['registered_after_hour_end']:.1f} s (commit_delay 30 s + "
        f"out-of-orderness 10 s of that are the table's own tolerances)",
        flush=True,
    )
    # (3) the same table's batch jobs, timed
    env_batch = environment(home, bootstrap)
    _, dump_wall, _ = run_measured(
        job("fresh", "dump", "bench-dump", "--processing-time", HOUR_END.isoformat()), env_batch
    )
    _, seal_wall, _ = run_measured(job("fresh", "seal", "bench-seal"), env_batch)
    result |= {"dump_wall": dump_wall, "seal_wall": seal_wall}
    print(
        f"(3) batch DAG, every {SCHEDULE_S:.0f} s: dump job {dump_wall:.1f} s, seal job {seal_wall:.1f} s: "
        f"produce -> committed mean {SCHEDULE_S / 2 + dump_wall:.0f} s, worst {SCHEDULE_S + dump_wall:.0f} s; "
        f"hour end -> registered mean {SCHEDULE_S / 2 + dump_wall + seal_wall + 40:.0f} s, worst "
        f"{SCHEDULE_S + dump_wall + seal_wall + 40:.0f} s (with the same 40 s of tolerances)",
        flush=True,
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--watch", type=float, default=150.0, help="seconds the freshness run produces")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    broker = TansuService(settings)
    started_here = not broker.status().running
    broker.start()
    scratch = Path(tempfile.mkdtemp(prefix="tidemark-bench-stream-"))
    try:
        if not args.skip_throughput:
            throughput(settings.kafka_bootstrap, args.messages, args.partitions, scratch)
        for interval in ("10s", "2s"):
            freshness(settings.kafka_bootstrap, args.partitions, args.watch, scratch, interval)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if started_here:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
