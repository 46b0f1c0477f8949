"""The phases' CPU seconds: the job's process tree, read from each process's own /proc
entries, holds what psutil's scan of every process finds, and counts its CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tidemark import stopwatch

pytestmark = pytest.mark.unit

# a child that spends about half a second of CPU, then waits beside a child of its own
SPINNER = (
    "import subprocess, sys, time\n"
    "end = time.process_time() + 0.5\n"
    "while time.process_time() < end: pass\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "time.sleep(60)\n"
)


def test_the_tree_holds_every_descendant_and_counts_their_cpu() -> None:
    me = psutil.Process()
    own = sum(me.cpu_times()[:2])
    child = subprocess.Popen([sys.executable, "-c", SPINNER], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not psutil.Process(child.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        scanned = {me.pid, *(p.pid for p in me.children(recursive=True))}
        assert len(scanned) >= 3  # this process, the spinner and its child
        assert {p.pid for p in stopwatch._tree(me)} == scanned
        assert stopwatch.tree_cpu_seconds() - own >= 0.4  # the spinner's half second
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def test_a_phase_counts_the_cpu_of_a_child_that_ended_within_it() -> None:
    """A forked compaction that ended before its phase did is counted (what its parent
    reaped), not lost with the process."""
    watch = stopwatch.Stopwatch(cpu=True)
    with watch.phase("compact"):
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass",
            ],
            check=True,
        )
    assert watch.cpu["compact"] >= 0.35
