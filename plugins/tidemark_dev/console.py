"""The demo's screen and its log files: one line per step on the terminal, while everything
Airflow, Spark and the JVM print (their file descriptors included: spark-submit and the JVM
write to fd 1 and 2 directly) goes to a log file per step under ``<home>/logs``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


class Console:
    """The terminal, kept aside while fds 1 and 2 point at a step's log file."""

    def __init__(self, log_dir: Path, name: str = "demo") -> None:
        """From here on, fds 1 and 2 write to ``<log dir>/<name>.log`` (outside the steps too:
        librdkafka and Python logging write there directly); :meth:`close` gives them back."""
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        self.out: TextIO = os.fdopen(os.dup(1), "w", buffering=1)
        self._terminal = os.dup(1), os.dup(2)
        main = self.log_dir / f"{name}.log"
        self.files: list[Path] = [main]
        with open(main, "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)

    def close(self) -> None:
        """Give fds 1 and 2 back to the terminal."""
        self._restore(self._terminal)
        self.out.close()

    def say(self, line: str = "") -> None:
        self.out.write(line + "\n")

    @contextmanager
    def step(self, name: str, title: str) -> Iterator[Path]:
        """Run a step with fds 1 and 2 in ``<log dir>/<name>.log``; print its title and, at
        the end, the seconds it took (or that it failed, and the log to read)."""
        path = self.log_dir / f"{name}.log"
        self.files.append(path)
        self.out.write(f"{title} ... ")
        started = time.monotonic()
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield path
            except BaseException:
                self._restore(saved)
                self.out.write(f"FAILED after {time.monotonic() - started:.0f} s (log: {path})\n")
                raise
            self._restore(saved)
        self.out.write(f"{time.monotonic() - started:.0f} s\n")

    @staticmethod
    def _restore(saved: tuple[int, int]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
