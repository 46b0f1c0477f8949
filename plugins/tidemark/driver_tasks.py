"""Spark's ``parallelize(items, slices).mapPartitions(task).collect()`` without Spark, where
the job's executors would run on this machine anyway (a ``local`` master) and its session
has not started: the same task function over the same slices, each slice in a process forked
from the driver.

Why: on a local master a Spark job of Python tasks costs a JVM, a SparkContext and Python
workers (about 6 CPU-seconds a dump here, a third of its work) to run, on the same cores,
what forked processes run for nothing: they inherit the driver's imports. The tasks stay
exactly what Spark would run (their crash points, receipts and counts); only who runs them
changes.

- **As many processes as slices**, forked (the driver's modules already imported; one
  that finished its slice may take another, as Spark reuses its Python workers), each set to
  die with the driver (``PR_SET_PDEATHSIG``): a killed job leaves no task writing behind it,
  as a local Spark's Python workers die with its JVM.
- **A failed task fails the job** with the task's own error where it crosses a process
  boundary intact, else with its text (what Spark's ``PythonException`` carries), so the
  callers' handlers that read a named error out of a task's text keep working.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import multiprocessing
import os
import pickle
import signal
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from tidemark.lazy_session import session_conf_value, spark_started

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class DriverTaskError(RuntimeError):
    """A task run in the driver's forked process failed with an error that does not cross a
    process boundary: its type, message and traceback as text."""


def local_cores(spark: Any) -> int | None:
    """The cores of the session's ``local`` master (``local``, ``local[N]``, ``local[*]``,
    ``local[N,F]``) where the session has not started; None where it has (its executors are
    warm) or the master is a cluster's."""
    if spark_started(spark):
        return None
    master = session_conf_value(spark, "spark.master")
    if not master.startswith("local"):
        return None
    cores = master.removeprefix("local").strip("[]").split(",")[0]
    if cores in ("", "1"):
        return 1
    return os.cpu_count() or 1 if cores == "*" else int(cores)


def map_slices(
    task: Callable[[Iterator[Any]], Iterable[Any]],
    items: Sequence[Any],
    slices: int,
    *,
    meanwhile: Callable[[], object] | None = None,
) -> list[Any]:
    """``task`` over ``items`` cut into ``slices`` contiguous slices (as Spark's
    ``parallelize`` cuts them), each in a forked process; every slice's results in order
    (``meanwhile``: run in the driver once they are forked, as ``map_forked``'s)."""
    cuts = [items[len(items) * i // slices : len(items) * (i + 1) // slices] for i in range(slices)]
    cuts = [list(cut) for cut in cuts if cut]
    if not cuts:
        return []
    log.info("%s tasks run in processes forked from the driver (no Spark: a local master)", len(cuts))
    results = map_forked(functools.partial(_slice_results, task), cuts, len(cuts), meanwhile=meanwhile)
    return [result for slice_results in results for result in slice_results]


def map_forked(
    func: Callable[[Any], Any],
    items: Sequence[Any],
    processes: int,
    *,
    meanwhile: Callable[[], object] | None = None,
    setup: Callable[[], object] | None = None,
) -> list[Any]:
    """``func`` of each item, in ``processes`` processes forked from the driver (an idle one
    takes the next item); the results in order. ``meanwhile`` runs in the driver once every
    process is forked and working: the driver's own work then overlaps the tasks' on another
    core, with no GIL between them, and no thread it starts was alive at the fork (a fork
    while another thread imports a module can leave that module's lock held in the child).
    ``setup`` runs first in each process."""
    if not items:
        if meanwhile is not None:
            meanwhile()
        return []
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(
        min(processes, len(items)),
        mp_context=context,
        initializer=_start_task_process,
        initargs=(os.getpid(), setup),
    ) as pool:
        futures = [pool.submit(_run_task, func, item) for item in items]  # forks them all first
        if meanwhile is not None:
            meanwhile()
        return [future.result() for future in futures]


def _start_task_process(driver: int, setup: Callable[[], object] | None) -> None:
    _die_with_driver(driver)
    if setup is not None:
        setup()


def _die_with_driver(driver: int) -> None:
    """Linux: SIGKILL this process when the driver dies (a killed job's tasks stop with it)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the pool's own shutdown is all there is
        return
    if os.getppid() != driver:  # the driver died before the line above
        os._exit(1)


def _slice_results(task: Callable[[Iterator[Any]], Iterable[Any]], items: list[Any]) -> list[Any]:
    return list(task(iter(items)))


def _run_task(func: Callable[[Any], Any], item: Any) -> Any:
    try:
        return func(item)
    except Exception as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            text = "".join(traceback.format_exception(exc))
            raise DriverTaskError(f"{type(exc).__name__}: {exc}\n{text}") from None
        raise
