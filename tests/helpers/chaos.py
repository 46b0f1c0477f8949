"""Chaos helpers shared by the e2e chaos tests: jobs as their own processes, killed with
SIGKILL at a random moment of their life as measured here."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

from tests.helpers.jobs import job_process
from tidemark.settings import Settings


def job(settings: Settings, name: str, table: str, run_id: str, *extra: str) -> subprocess.Popen[str]:
    return job_process(settings, name, table, run_id, *extra)


class JobClock:
    """How long each kind of job ran to completion here, so a kill lands within a job's life
    however fast this machine (and its JVM start: the class archive halves it) runs jobs."""

    def __init__(self, first_guess: float) -> None:
        self.first_guess = first_guess
        self.seconds: dict[str, float] = {}

    def lifetime(self, name: str) -> float:
        return self.seconds.get(name, self.first_guess)

    def finish(self, settings: Settings, name: str, table: str, run_id: str, *extra: str) -> None:
        started = time.monotonic()
        proc = job(settings, name, table, run_id, *extra)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name} {run_id} failed after chaos:\n{err[-4000:]}"
        self.seconds[name] = time.monotonic() - started


def killed_at_random(proc: subprocess.Popen[str], rng: random.Random, lifetime: float) -> bool:
    """SIGKILL the job's whole process group at a random moment of ``lifetime`` (how long such
    a job took here); False if it ended first."""
    deadline = time.monotonic() + rng.uniform(0.5, 0.85 * lifetime)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            proc.communicate()
            return False
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    return True
