"""How fresh the fresh read is: produce -> readable by name on an Iceberg table's branch
``fresh`` (or a Hive table's ``<table>_fresh``), with the stream and with the batch DAG; and
how long until complete (sealed).

    .venv/bin/python bench/fresh.py [--partitions 4] [--watch 150] [--trigger 10s] [--schedule 600]
        [--table-format iceberg|hive]

A Hive table's home runs its own metastore service (``derby-metastore``, as `make up` does),
which every job finds; the reader lists ``fresh_fresh``'s partitions over Thrift and reads each
file it has not read yet (a mirror's files never change).

(1) The stream (``spark_jobs/stream.py``, the table's default ``trigger_interval`` unless
    ``--trigger``) on an Iceberg table with ``max_out_of_orderness: 10s``, ``commit_delay: 30s``.
    Before it starts, one record per MQ partition in each of the two hours before the
    measured one: its first micro-batch seals the first, which makes the table and its branch.
    A producer then sends one record per MQ partition every 0.5 s, the stream's clock as event
    time (the clock starts a minute before an hour's end); a reader polls the branch's head by
    name (pyiceberg, as any reader would: the catalog, then the head's files) every 0.2 s and
    notes when each record is first read. Printed: ``fresh p50 = X s, p99 = Y s (stream)``;
    hour end -> registered (the complete read), and from it ``sealed p50`` of a steady stream
    (a record waits half an hour on average for its hour to end).
(2) The batch DAG on the same table: the dump job (its fresh sync included) and the seal job
    timed; a schedule of S seconds adds U(0, S) of waiting: fresh = U(0, S) + dump, computed.

Prints the figures; they go to docs/benchmarks.md. Not a test.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump_throughput import run_measured
from stream import HOUR_END, clock_offset, environment, job, produce_steadily, switch_to_stream, table_yaml

from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.metastore_service import MetastoreConnection
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark.state.mode import TableWriter
from tidemark_dev.derby_metastore import DerbyMetastoreService
from tidemark_dev.generator import create_topic, produce, records
from tidemark_dev.net import free_port
from tidemark_dev.services import TansuService

TABLE = "fresh"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def _read_loop(
    settings: Settings, seen: dict[tuple[int, int], float], branch_at: list[float], stop: threading.Event
) -> None:
    """Poll the branch head by name; note when each (MQ partition, offset) is first read, and
    when the branch was first there (``branch_at``)."""
    catalog = open_catalog(settings)
    last_head = None
    while not stop.is_set():
        try:
            table = catalog.load_table(identifier(TABLE))
        except Exception:  # not made yet
            stop.wait(0.2)
            continue
        ref = table.metadata.refs.get("fresh")
        if ref is not None and not branch_at:
            branch_at.append(time.time())
        if ref is not None and ref.snapshot_id != last_head:
            frame = table.scan(snapshot_id=ref.snapshot_id, selected_fields=("_mq_partition", "_mq_offset"))
            arrow = frame.to_arrow()
            now = time.time()
            for key in zip(arrow["_mq_partition"].to_pylist(), arrow["_mq_offset"].to_pylist(), strict=True):
                seen.setdefault(key, now)
            last_head = ref.snapshot_id
        stop.wait(0.2)


def _hive_read_loop(
    settings: Settings, seen: dict[tuple[int, int], float], made_at: list[float], stop: threading.Event
) -> None:
    """Poll ``fresh_fresh``'s partitions by name over Thrift; read every file not read yet;
    note when each (MQ partition, offset) is first read, and when the table was first there."""
    import pyarrow.parquet as pq

    connection = MetastoreConnection(settings.hive_metastore_uris, TABLE)
    layout = Layout(settings, TABLE)
    read: set[str] = set()
    while not stop.is_set():
        if connection.table(f"{TABLE}_fresh") is None:
            stop.wait(0.2)
            continue
        if not made_at:
            made_at.append(time.time())
        for part in connection.partitions(f"{TABLE}_fresh"):
            for relative in layout.store.files(layout.store_relative(str(part.sd.location))):
                if relative in read:
                    continue
                table = pq.read_table(layout.store.path(relative), columns=["_mq_partition", "_mq_offset"])
                now = time.time()
                for key in zip(
                    table["_mq_partition"].to_pylist(), table["_mq_offset"].to_pylist(), strict=True
                ):
                    seen.setdefault(key, now)
                read.add(relative)
        stop.wait(0.2)
    connection.close()


def stream_freshness(
    bootstrap: str, partitions: int, watch_s: float, scratch: Path, *, trigger: str | None, table_format: str
) -> Path:
    home = scratch / "fresh"
    topic = f"fresh_{uuid.uuid4().hex[:8]}"
    overrides = {"stream__trigger_interval": trigger} if trigger else {}
    table_yaml(
        home / "conf",
        TABLE,
        topic,
        output__table_format=table_format,
        watermark__max_out_of_orderness="10s",
        watermark__commit_delay="30s",
        **overrides,
    )
    create_topic(bootstrap, topic, partitions)
    # the two hours before the measured one: the first seals at once, making the table
    before = [HOUR_END - timedelta(minutes=115), HOUR_END - timedelta(minutes=58)]
    produce(bootstrap, topic, records([(p, t) for t in before for p in range(partitions)], prefix="seed"))
    env = environment(home, bootstrap)
    settings = Settings.from_env(env)
    switch_to_stream(home, bootstrap, TABLE)
    log_file = (home / "stream.log").open("w")
    clock_from = HOUR_END - timedelta(seconds=60)
    stream = subprocess.Popen(
        job(TABLE, "stream", "bench-fresh", "--clock-from", clock_from.isoformat()),
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    produced: dict[tuple[int, int], float] = {}
    seen: dict[tuple[int, int], float] = {}
    branch_at: list[float] = []
    stop = threading.Event()
    offset = clock_offset(home, TABLE, stream)
    hour_end_wall = HOUR_END.timestamp() - offset
    hour_key = (HOUR_END - timedelta(hours=1)).strftime("%Y-%m-%dT%H")
    journal = HourJournal(settings.state_location, TABLE)
    threads = [
        threading.Thread(
            target=produce_steadily,
            args=(bootstrap, topic, partitions),
            kwargs={"offset": offset, "produced": produced, "stop": stop},
            daemon=True,
        ),
        threading.Thread(
            target=_read_loop if table_format == "iceberg" else _hive_read_loop,
            args=(settings, seen, branch_at, stop),
            daemon=True,
        ),
    ]
    for thread in threads:
        thread.start()
    registered_at = None
    deadline = time.time() + watch_s
    try:
        while time.time() < deadline:
            if registered_at is None and (entry := journal.state().hours.get(hour_key)) and entry.published:
                registered_at = time.time()
            if stream.poll() is not None:
                raise SystemExit(f"the stream exited; see {home / 'stream.log'}")
            time.sleep(0.25)
        time.sleep(3.0)  # the last records' micro-batch
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        TableWriter(settings.state_location, TABLE).switch("batch", by="bench", reason="done", at="bench")
        stream.wait(timeout=120)
        log_file.close()
    # measured: records produced once the branch was there (the first micro-batch seals the
    # hour before and makes the table: Spark's start, once per table); steady: before the hour
    # ends, or after it is registered; the hour's end: between (the stream seals it inline)
    first = branch_at[0] if branch_at else float("inf")
    done = registered_at or deadline
    steady = [
        seen[k] - t for k, t in produced.items() if k in seen and t >= first and not hour_end_wall <= t < done
    ]
    at_end = [seen[k] - t for k, t in produced.items() if k in seen and hour_end_wall <= t < done]
    unread = [k for k, t in produced.items() if k not in seen and t < deadline - 15.0]
    registered = (registered_at - hour_end_wall) if registered_at else float("nan")
    print(
        f"(1) stream, trigger {trigger or 'the default'}, {table_format}: {len(seen)} records read on the "
        "fresh read, "
        f"{len(unread)} produced 15 s before the end unread; {len(steady)} steady, {len(at_end)} while the "
        f"stream sealed the hour",
        flush=True,
    )
    print(
        f"fresh p50 = {statistics.median(steady):.1f} s, p99 = {_percentile(steady, 0.99):.1f} s (stream)",
        flush=True,
    )
    if at_end:
        print(
            f"  while the hour sealed: p50 {statistics.median(at_end):.1f} s, max {max(at_end):.1f} s",
            flush=True,
        )
    print(
        f"sealed p50 = {1800 + registered:.0f} s (stream: half an hour in its hour, then hour end -> "
        f"registered {registered:.1f} s, of which commit_delay 30 s + out-of-orderness 10 s)",
        flush=True,
    )
    return home


def batch_freshness(home: Path, bootstrap: str, schedule_s: float) -> None:
    env = environment(home, bootstrap)
    _, dump_wall, _ = run_measured(
        job(TABLE, "dump", "bench-dump", "--processing-time", (HOUR_END + timedelta(minutes=5)).isoformat()),
        env,
    )
    _, seal_wall, _ = run_measured(job(TABLE, "seal", "bench-seal"), env)
    print(
        f"fresh p50 = {schedule_s / 2 + dump_wall:.0f} s, p99 = {0.99 * schedule_s + dump_wall:.0f} s "
        f"(batch DAG every {schedule_s:.0f} s, computed: U(0, {schedule_s:.0f} s) + the dump job "
        f"{dump_wall:.1f} s, its fresh sync included)",
        flush=True,
    )
    print(
        f"sealed p50 = {1800 + 40 + schedule_s / 2 + dump_wall + seal_wall:.0f} s (batch DAG: half an hour, "
        f"the 40 s of tolerances, U(0, {schedule_s:.0f} s), the dump and the seal job {seal_wall:.1f} s)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--watch", type=float, default=150.0, help="seconds the producer runs")
    parser.add_argument("--trigger", default=None, help="the stream's trigger (default: the table's default)")
    parser.add_argument("--schedule", type=float, default=600.0, help="the batch DAG's interval, s")
    parser.add_argument("--table-format", choices=["iceberg", "hive"], default="iceberg")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    broker = TansuService(settings)
    started_here = not broker.status().running
    broker.start()
    scratch = Path(tempfile.mkdtemp(prefix="tidemark-bench-fresh-"))
    metastore = None
    if args.table_format == "hive":  # the home's service, found by every job through its pid file
        home = Settings.from_env(environment(scratch / "fresh", settings.kafka_bootstrap))
        metastore = DerbyMetastoreService(replace(home, metastore_port=free_port()))
        metastore.start()
    try:
        home_dir = stream_freshness(
            settings.kafka_bootstrap,
            args.partitions,
            args.watch,
            scratch,
            trigger=args.trigger,
            table_format=args.table_format,
        )
        batch_freshness(home_dir, settings.kafka_bootstrap, args.schedule)
    finally:
        if metastore is not None:
            metastore.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        if started_here:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
