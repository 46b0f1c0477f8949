"""Dump and seal throughput with the warehouse and state on S3 against the local disk, in one
sitting, over the same records.

    .venv/bin/python bench/object_store.py [--messages 1000000] [--partitions 4]

Produces M JSON events of ~200 B (event-time hour 10, and one record per partition at 12:20
so hour 10 seals) to a fresh topic of the local
broker (started if needed), starts a local S3 server (SeaweedFS, ``weed mini``) on its own
ports, then runs the real jobs (``spark_jobs/dump.py`` and ``spark_jobs/seal.py``, each as
spark-submit runs it) twice over the same offsets: once with ``TIDEMARK_WAREHOUSE`` and
``TIDEMARK_STATE_DIR`` on local disk (rename-based publish, directory swaps), once on S3
(files written once in place, versioned hour directories, conditional PUTs for state).
Prints the dump's processing time and phases, the seal's wall time less its Spark session
start, records/s, and the S3/local ratios. Not a test: the figures are for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _services import start_local_s3
from dump_throughput import PROCESSING, ROOT, bench_table, dump_command, produce_sealable, run_measured

from tidemark.settings import Settings
from tidemark_dev.services import TansuService


def run_jobs(env: dict[str, str], total: int) -> dict[str, float]:
    """Dump then seal; the figures of one storage."""
    out, dump_wall, dump_rss = run_measured(dump_command(PROCESSING + timedelta(hours=1)), env)
    if out["read"] != total:
        raise SystemExit(f"dump read {out['read']} records, expected {total}")
    t = out["timings"]
    processing = sum(t[k] for k in ("rollback", "read_stage", "reconcile", "publish", "commit"))
    seal_cmd = [
        sys.executable,
        str(ROOT / "spark_jobs" / "seal.py"),
        "--table",
        "bench",
        "--run-id",
        "seal-1",
    ]
    sealed, seal_wall, seal_rss = run_measured(seal_cmd, env)
    if "2026-11-22T10" not in sealed["sealed"]:
        raise SystemExit(f"expected hour 10 sealed, got {sealed['sealed']}")
    return {
        "dump_processing_s": processing,
        "dump_wall_s": dump_wall,
        "dump_rss_mb": dump_rss,
        "seal_s": seal_wall - sealed["session_start_s"],
        "seal_wall_s": seal_wall,
        "seal_rss_mb": seal_rss,
        **{f"phase_{k}": v for k, v in t.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    broker = TansuService(settings)
    broker_started_here = not broker.status().running
    broker.start()
    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-s3-"))
    port = int(os.environ.get("BENCH_S3_PORT", "18600"))
    s3, s3_env = start_local_s3(settings, home / "s3-service", port, "bench")
    try:
        topic = f"bench_{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        ends, value_bytes = produce_sealable(settings.kafka_bootstrap, topic, args.messages, args.partitions)
        total = sum(ends.values())
        print(f"produced {total:,} messages ({value_bytes / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s")
        figures = {}
        for storage in ("local", "s3"):
            run_home = home / storage
            bench_table(run_home / "conf", topic, max(ends.values()))
            env = {
                **os.environ,
                "TIDEMARK_HOME": str(run_home),
                "TIDEMARK_CONF_DIR": str(run_home / "conf"),
                "TIDEMARK_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            }
            if storage == "s3":
                env.update(s3_env)
                env["TIDEMARK_WAREHOUSE"] = "s3://bench/warehouse"
                env["TIDEMARK_STATE_DIR"] = "s3://bench/state"
            figures[storage] = run_jobs(env, total)
            f = figures[storage]
            print(
                f"{storage:<6} dump processing {f['dump_processing_s']:6.2f} s "
                f"({total / f['dump_processing_s']:>9,.0f} rec/s; wall {f['dump_wall_s']:.1f} s, "
                f"peak RSS {f['dump_rss_mb']:.0f} MB) | seal {f['seal_s']:6.2f} s "
                f"({total / f['seal_s']:>9,.0f} rec/s; wall {f['seal_wall_s']:.1f} s)",
                flush=True,
            )
            phases = {k.removeprefix("phase_"): round(v, 2) for k, v in f.items() if k.startswith("phase_")}
            print(f"       dump phases (s): {phases}", flush=True)
        local, remote = figures["local"], figures["s3"]
        print(
            f"S3/local time ratios: dump processing {remote['dump_processing_s'] / local['dump_processing_s']:.2f}, "
            f"seal {remote['seal_s'] / local['seal_s']:.2f}"
        )
        print(
            f"machine: {platform.node()}, {os.cpu_count()} cores, "
            f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}, "
            f"{datetime.now(UTC):%Y-%m-%d}; S3 is SeaweedFS on the same machine (no network latency)"
        )
    finally:
        s3.stop()
        if broker_started_here:
            broker.stop()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
