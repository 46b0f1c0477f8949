"""Helpers of bench/fleet.py (not a benchmark itself): one hourly cycle (dump + seal) of N
tables as per-table jobs against one group job, in wall seconds and CPU-seconds.

CPU-seconds are the sum over every process of the job's tree (the Python driver, its JVM,
Spark's Python workers), sampled every 0.1 s with psutil (a process's last 0.1 s can be
missed; both sides lose the same share). Per-table jobs are independent processes of the same
size, so they are measured on a sample of the tables and scaled to N (both the sample and the
scaled figure are printed).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import yaml

from tidemark_dev.generator import create_topic, events, produce, records

ROOT = Path(__file__).resolve().parents[1]


def tree_cpu(command: list[str], env: dict[str, str]) -> tuple[float, float, dict[str, Any]]:
    """Run ``command``; its wall seconds, the CPU-seconds of its whole process tree and its
    JSON result line."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[tuple[int, float], float] = {}
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                family = [root, *root.children(recursive=True)]
            except psutil.Error:
                return
            for p in family:
                try:
                    times = p.cpu_times()
                    seen[(p.pid, p.create_time())] = times.user + times.system
                except psutil.Error:
                    continue
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        sys.stderr.write(err[-4000:])
        raise SystemExit(f"{command[1:4]} failed with exit code {proc.returncode}")
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    return time.perf_counter() - started, sum(seen.values()), result


def write_group(conf: Path, names: list[str], group: str | None) -> None:
    template = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    conf.mkdir(parents=True, exist_ok=True)
    for name in names:
        data = {**template, "table": name, "source": {**template["source"], "topic": name}}
        if group:
            data["group"] = group
        (conf / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def produce_tables(bootstrap: str, names: list[str], per_table: int) -> None:
    """``per_table`` events of hour 10 on 2 MQ partitions per topic, and one record per
    partition at 11:50, so hour 10 seals."""

    start = datetime(2026, 11, 22, 10, tzinfo=UTC)
    for name in names:
        create_topic(bootstrap, name, 2)
        produce(bootstrap, name, events(per_table, start=start, partitions=2), one_per_request=False)
        produce(
            bootstrap, name, records([(p, start + timedelta(minutes=110)) for p in (0, 1)], prefix="tail")
        )


def job(script: str, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "spark_jobs" / f"{script}.py"), *args, "--run-id", "bench-1"]


def grouped_sitting(
    bootstrap: str, home: Path, *, tables: int, per_table: int, sample: int, env: dict[str, str]
) -> float:
    """Print the per-table and grouped figures; return grouped/per-table CPU-seconds."""
    processing = "2026-11-22T12:00:00+00:00"
    alone = [f"alone_{i:03d}" for i in range(min(sample, tables))]
    grouped = [f"grouped_{i:03d}" for i in range(tables)]
    started = time.perf_counter()
    produce_tables(bootstrap, alone + grouped, per_table)
    print(
        f"produced {per_table:,} records to each of {len(alone) + len(grouped)} topics in "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )

    conf = home / "conf-alone"
    write_group(conf, alone, None)
    run_env = {**env, "TIDEMARK_HOME": str(home / "alone"), "TIDEMARK_CONF_DIR": str(conf)}
    wall = cpu = 0.0
    for name in alone:
        for command in (
            job("dump", "--table", name, "--processing-time", processing),
            job("seal", "--table", name),
        ):
            w, c, result = tree_cpu(command, run_env)
            wall, cpu = wall + w, cpu + c
            if "seal" in command[1] and "2026-11-22T10" not in result.get("sealed", []):
                raise SystemExit(f"{name}: the seal did not seal hour 10: {result}")
    scale = tables / len(alone)
    print(
        f"per-table jobs, {len(alone)} tables ({2 * len(alone)} applications): wall {wall:.1f} s, "
        f"cpu {cpu:.1f} s; scaled to {tables} tables: wall {wall * scale:.0f} s, cpu {cpu * scale:.0f} s",
        flush=True,
    )

    conf = home / "conf-grouped"
    write_group(conf, grouped, "bench")
    run_env = {**env, "TIDEMARK_HOME": str(home / "grouped"), "TIDEMARK_CONF_DIR": str(conf)}
    group_wall = group_cpu = 0.0
    for step in ("dump", "seal"):
        extra = ["--processing-time", processing] if step == "dump" else []
        w, c, result = tree_cpu(job("group", "--group", "bench", "--job", step, *extra), run_env)
        if result["failed"] or len(result["tables"]) != tables:
            raise SystemExit(f"the group {step} failed for {result['failed']}")
        print(f"group {step}, {tables} tables in one application: wall {w:.1f} s, cpu {c:.1f} s", flush=True)
        group_wall, group_cpu = group_wall + w, group_cpu + c
    print(f"grouped/per-table wall = {group_wall / (wall * scale):.2f}")
    return group_cpu / (cpu * scale)
