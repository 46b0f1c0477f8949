"""One table's stalled broker against the rest of its group: how much later do the other tables
of a 10-table group commit, in one sitting.

    .venv/bin/python bench/group_stall.py [--tables 10] [--records 20000] [--runs 2]

Ten tables of one group (the events example), ``--records`` events of hour 10 each on the local
broker (started if needed). The group's dump (``spark_jobs/group.py --job dump``, its default
parallelism and fair-scheduler pools) runs twice per sitting, alternating: every table healthy,
and one table whose ``bootstrap.servers`` is a broker that accepts connections and never
answers (a hung broker process). For each run it reads, from the job's own log, when each
table's commit was done, counted from the job's first line, and prints the slowest of the
healthy tables. Last: ``stalled/normal = X.XX``, the median over the runs of the slowest healthy
table's commit time with the stall against without it (the goal is <= 1.5). Not a test.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _grouped import job, produce_tables, write_group

from tidemark.settings import Settings
from tidemark_dev.net import SilentServer
from tidemark_dev.services import TansuService

LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?: (.*)$")
DONE = re.compile(r"^(\S+) \(group \S+\): dump of run \S+ (ok|failed|skipped) in ([\d.]+) s")


def commit_times(stderr: str) -> dict[str, tuple[str, float]]:
    """Table -> (status, seconds from the group job's first line to its part's end)."""
    first: datetime | None = None
    done = {}
    for line in stderr.splitlines():
        matched = LINE.match(line)
        if not matched:
            continue
        at = datetime.strptime(matched.group(1), "%Y-%m-%d %H:%M:%S,%f")
        first = first or at
        part = DONE.match(matched.group(2))
        if part:
            done[part.group(1)] = (part.group(2), (at - first).total_seconds())
    return done


def run_dump(env: dict[str, str], run_id: str) -> dict[str, tuple[str, float]]:
    command = job(
        "group", "--group", "bench", "--job", "dump", "--processing-time", "2026-11-22T12:00:00+00:00"
    )
    command[command.index("bench-1")] = run_id
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"the group dump failed with exit code {proc.returncode}")
    return commit_times(proc.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args(argv)

    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-stall-"))
    settings = Settings.from_env()
    broker = TansuService(settings)
    started_here = not broker.status().running
    broker.start()
    bootstrap = settings.kafka_bootstrap
    ratios = []
    try:
        with SilentServer() as silent:
            for run in range(args.runs):
                slowest: dict[str, float] = {}
                for case in ("normal", "stalled") if run % 2 == 0 else ("stalled", "normal"):
                    names = [f"{case}{run}_{i:02d}" for i in range(args.tables)]
                    produce_tables(bootstrap, names, args.records)
                    conf = home / f"conf-{case}-{run}"
                    write_group(conf, names, "bench")
                    stuck = names[0]
                    if case == "stalled":
                        data = yaml.safe_load((conf / f"{stuck}.yaml").read_text())
                        data["source"]["kafka_properties"] = {"bootstrap.servers": f"127.0.0.1:{silent.port}"}
                        (conf / f"{stuck}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
                    env = {
                        **os.environ,
                        "TIDEMARK_HOME": str(home / f"{case}-{run}"),
                        "TIDEMARK_CONF_DIR": str(conf),
                        "TIDEMARK_KAFKA_BOOTSTRAP": bootstrap,
                    }
                    started = time.perf_counter()
                    times = run_dump(env, f"bench-{case}-{run}")
                    wall = time.perf_counter() - started
                    healthy = {t: s for t, (status, s) in times.items() if t != stuck or case == "normal"}
                    if any(times[t][0] != "ok" for t in healthy):
                        raise SystemExit(f"{case}: a healthy table failed: {times}")
                    slowest[case] = max(healthy.values())
                    stalled_part = (
                        f", the stalled table {times[stuck][0]} at {times[stuck][1]:.1f} s"
                        if case == "stalled"
                        else ""
                    )
                    print(
                        f"run {run + 1} {case:<7}: {len(healthy)} healthy tables committed by "
                        f"{slowest[case]:.1f} s (median {statistics.median(healthy.values()):.1f} s){stalled_part}; "
                        f"application wall {wall:.1f} s",
                        flush=True,
                    )
                ratios.append(slowest["stalled"] / slowest["normal"])
    finally:
        if started_here:
            broker.stop()
        shutil.rmtree(home, ignore_errors=True)
    print(f"stalled/normal = {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
