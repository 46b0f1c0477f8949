"""Seconds spent per named phase of a job: logged with its result (dump, seal) and printed by
the benchmarks, so where the time goes is visible in every task log. With
``TIDEMARK_PHASE_CPU=1`` (the benchmarks set it) each phase also records the CPU seconds the
job's process tree spent in it (the driver JVM, this Python process and Spark's Python
workers): wall time on a busy machine says little about cost, CPU does. Off by default: a
look at every process costs a few milliseconds a phase."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil


@functools.cache
def _root() -> psutil.Process:
    """The job's driver process: the JVM that started this Python process (spark-submit),
    else this process (a local session's JVM is its child)."""
    import psutil  # noqa: PLC0415 (the driver's only: a cluster's executors lack psutil)

    me = psutil.Process()
    parent = me.parent()
    with contextlib.suppress(psutil.Error):
        if parent is not None and parent.name() == "java":
            return parent
    return me


# Linux names each thread's children in /proc/<pid>/task/<tid>/children: a process tree read
# from its own entries, where psutil's children() reads every process of the machine (~4 ms,
# twice a phase)
_PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _children(pid: int) -> list[int]:
    pids: list[int] = []
    with contextlib.suppress(OSError):  # the process ended
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as listing:
                pids.extend(int(p) for p in listing.read().split())
    return pids


def _tree(root: psutil.Process) -> list[psutil.Process]:
    import psutil  # noqa: PLC0415

    if not _PROC_CHILDREN:
        return [root, *root.children(recursive=True)]
    tree, pending = [root], _children(root.pid)
    while pending:
        pid = pending.pop()
        with contextlib.suppress(psutil.Error):
            tree.append(psutil.Process(pid))
        pending.extend(_children(pid))
    return tree


def tree_cpu_seconds() -> float:
    """CPU seconds spent so far by the job's process tree: its driver and every live process
    below it, with what each has reaped of its own children (a forked compaction that ended
    is its parent's now, not gone)."""
    import psutil  # noqa: PLC0415

    total = 0.0
    for process in _tree(_root()):
        with contextlib.suppress(psutil.Error):  # gone between the listing and the read
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


class Stopwatch:
    def __init__(self, *, cpu: bool | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.counts_cpu = os.environ.get("TIDEMARK_PHASE_CPU") == "1" if cpu is None else cpu

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        cpu = tree_cpu_seconds() if self.counts_cpu else 0.0
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
            if self.counts_cpu:
                self.cpu[name] = self.cpu.get(name, 0.0) + max(tree_cpu_seconds() - cpu, 0.0)

    def add(self, other: Stopwatch) -> None:
        for name, seconds in other.seconds.items():
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        for name, seconds in other.cpu.items():
            self.cpu[name] = self.cpu.get(name, 0.0) + seconds

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.seconds.items()}

    def rounded_cpu(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in self.cpu.items()}
