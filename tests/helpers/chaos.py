"""Chaos helpers shared by the e2e chaos tests: jobs as their own processes, killed with
SIGKILL at a random moment of their life.

A moment is picked by progress, not by the clock: the kill comes a random fraction of a
second after a random log line of the job's life (as counted on a finished run of the same
job here). A clock alone failed on a loaded CI machine, where the measured run took twice
as long as the killed one, which then ended before its kill."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from typing import IO

from tests.helpers.jobs import job_process
from tidemark.settings import Settings

# a log line of tidemark's own (spark_jobs log through ``logging.basicConfig``, on stderr):
# Spark's and the JVM's lines vary from run to run, tidemark's follow the job's progress
PROGRESS_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ [A-Z]+ tidemark[\w.]*: ")


def progress_lines(text: str) -> int:
    """How many of tidemark's own log lines ``text`` (a job's stderr) holds."""
    return sum(1 for line in text.splitlines() if PROGRESS_LINE.match(line))


def job(settings: Settings, name: str, table: str, run_id: str, *extra: str) -> subprocess.Popen[str]:
    return job_process(settings, name, table, run_id, *extra)


class JobClock:
    """How long each kind of job ran to completion here, and how many log lines it printed,
    so a kill lands within a job's life however fast this machine runs jobs."""

    def __init__(self, first_guess: float) -> None:
        self.first_guess = first_guess
        self.seconds: dict[str, float] = {}
        self.lines: dict[str, int] = {}

    def lifetime(self, name: str) -> float:
        return self.seconds.get(name, self.first_guess)

    def life(self, name: str) -> tuple[float, int | None]:
        """(seconds, log lines) of the last finished job called ``name``."""
        return self.lifetime(name), self.lines.get(name)

    def finish(self, settings: Settings, name: str, table: str, run_id: str, *extra: str) -> None:
        """Run the job to its end; its life counts if it is the longest of its name so far (a
        retry that only finishes a killed run's work, or a job with nothing left to do, is
        short, and a kill aimed by it would miss the next job with real work)."""
        started = time.monotonic()
        proc = job(settings, name, table, run_id, *extra)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name} {run_id} failed after chaos:\n{err[-4000:]}"
        self.seconds[name] = max(time.monotonic() - started, self.seconds.get(name, 0.0))
        self.lines[name] = max(progress_lines(err), self.lines.get(name, 0))


class _LineCounter:
    """Drains a job's stdout and stderr (so neither pipe fills) and counts tidemark's own log
    lines on stderr."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.count = 0
        self._changed = threading.Condition()
        assert proc.stdout is not None and proc.stderr is not None
        self._threads = [
            threading.Thread(target=self._read, args=(proc.stdout, False), daemon=True),
            threading.Thread(target=self._read, args=(proc.stderr, True), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read(self, stream: IO[str], counted: bool) -> None:
        for line in stream:
            if counted and PROGRESS_LINE.match(line):
                with self._changed:
                    self.count += 1
                    self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, lines: int, proc: subprocess.Popen[str]) -> None:
        with self._changed:
            while self.count < lines and proc.poll() is None:
                self._changed.wait(timeout=0.05)

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=30)


def killed_at_random(
    proc: subprocess.Popen[str], rng: random.Random, lifetime: float, lines: int | None = None
) -> bool:
    """SIGKILL the job's whole process group at a random moment of its life; False if it
    ended first. With ``lines`` (how many log lines such a job printed here), the kill comes
    up to 0.3 s after a random one of them but the last two; without, at a random moment
    of ``lifetime`` seconds."""
    counter = _LineCounter(proc)
    if lines is not None and lines >= 2:
        counter.wait_for(rng.randint(1, max(1, lines - 2)), proc)
        deadline = time.monotonic() + rng.uniform(0.0, 0.3)
    else:
        deadline = time.monotonic() + rng.uniform(min(0.5, 0.3 * lifetime), 0.85 * lifetime)
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    counter.join()
    return killed
