"""A Spark session started on first use: the seal's.

A seal whose hours are small, on a local master, over a metastore service, needs no JVM:
pyarrow compacts and checks the hours in the driver and the partitions are registered over
Thrift. Starting Spark anyway costs about 6 CPU-seconds, more than the seal's own work. So the
seal job gets a ``LazySession``: the same session, built from the same conf the first time
something asks it for anything (a big hour, a table to create, Great Expectations, an
Iceberg commit), and never where nothing does.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., object])


class LazySession:
    """Stands for the SparkSession ``build`` returns, built on the first attribute asked for
    (from any thread: the seal's warm-up threads may ask first). ``conf`` is the conf it is
    built with, readable before it starts (:func:`session_conf_value`)."""

    def __init__(self, name: str, build: Callable[[], SparkSession], conf: Mapping[str, str]) -> None:
        self._name = name
        self._build = build
        self._conf = dict(conf)
        self._session: SparkSession | None = None
        self._lock = threading.Lock()
        self.start_seconds = 0.0  # how long the start took, 0 where it never started

    @property
    def started(self) -> bool:
        return self._session is not None

    def planned(self, key: str) -> str:
        """The value of ``key`` in the conf the session is (or will be) built with."""
        return self._conf.get(key, "")

    def session(self, *, eager: bool = False) -> SparkSession:
        """The session, started now if it was not (``eager``: by a job that always wants it)."""
        with self._lock:
            if self._session is None:
                if not eager:
                    log.info("%s: starting Spark, first needed by %s", self._name, _first_caller())
                started = time.perf_counter()
                self._session = self._build()
                self.start_seconds = time.perf_counter() - started
            return self._session

    def stop(self) -> None:
        """Stop the session if it started (a job always stops it)."""
        with self._lock:
            if self._session is not None:
                self._session.stop()

    @contextlib.contextmanager
    def for_this_process(self) -> Iterator[LazySession]:
        """This session as the process's job session while the job runs: what
        :func:`spark_context` starts for code that reaches the JVM without a handle."""
        _JOB_SESSIONS.append(self)
        try:
            yield self
        finally:
            _JOB_SESSIONS.remove(self)

    def __getattr__(self, name: str) -> Any:
        # only for what this class lacks: everything a SparkSession has
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.session(), name)


def _first_caller() -> str:
    """Where in tidemark the session was first asked for (the task log says why Spark started)."""
    frames = [
        f
        for f in traceback.extract_stack()[:-3]
        if "/tidemark/" in f.filename and "lazy_session" not in f.filename
    ]
    if not frames:
        return "the job"
    frame = frames[-1]
    return f"{frame.filename.rsplit('/tidemark/', 1)[-1]}:{frame.lineno} ({frame.name})"


_JOB_SESSIONS: list[LazySession] = []  # the running job's (LazySession.for_this_process)


def spark_context() -> SparkContext | None:
    """The process's active SparkContext, the job's lazy session started for it where it has
    not started yet (Iceberg's Java commits reach the JVM through the active context, not
    through a session handed to them); None with neither."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is None and _JOB_SESSIONS:
        _JOB_SESSIONS[-1].session()
    return SparkContext._active_spark_context


def session_conf_value(spark: Any, key: str) -> str:
    """``key`` of a session's conf, without starting a :class:`LazySession` for it."""
    if isinstance(spark, LazySession) and not spark.started:
        return spark.planned(key)
    return spark.sparkContext.getConf().get(key, "") or ""


def spark_started(spark: Any) -> bool:
    """Whether ``spark`` is a running session (a lazy one that never started is not)."""
    return not isinstance(spark, LazySession) or spark.started


_WITHOUT_PYSPARK = "__tidemark_without_pyspark__"


def without_pyspark(function: F) -> F:
    """Marks a warm-up that never imports pyspark (a Thrift connection): a seal whose every
    warm-up is marked starts its threads without importing pyspark first (~0.2 s)."""
    setattr(function, _WITHOUT_PYSPARK, True)
    return function


def imports_pyspark(task: Callable[..., object]) -> bool:
    """Whether ``task`` (a function or bound method) may import pyspark: unless marked."""
    return not getattr(task, _WITHOUT_PYSPARK, False)
