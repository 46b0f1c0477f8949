"""Spark's ``mapPartitions`` on a local master without Spark (``tidemark.driver_tasks``):
which sessions run their tasks in the driver's forked processes, the slices as Spark cuts
them, failures that reach the job with their text, and tasks that die with a killed driver.
The dump's real runs through it are the e2e tests' (test_dump_faults, chaos)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from tidemark.driver_tasks import DriverTaskError, local_cores, map_forked, map_slices
from tidemark.lazy_session import LazySession
from tidemark.task_runtime import jemalloc_in_a_fresh_process

pytestmark = pytest.mark.unit


def never_built() -> None:
    raise AssertionError("the session must not start")


def lazy(master: str) -> LazySession:
    return LazySession("test", never_built, {"spark.master": master})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("master", "cores"),
    [
        ("local", 1),
        ("local[1]", 1),
        ("local[3]", 3),
        ("local[2,4]", 2),
        ("local[*]", os.cpu_count()),
        ("spark://127.0.0.1:7077", None),
        ("yarn", None),
    ],
)
def test_a_local_master_s_cores_and_none_for_a_cluster(master: str, cores: int | None) -> None:
    assert local_cores(lazy(master)) == cores


def test_a_started_session_keeps_its_warm_executors() -> None:
    class Started:  # not a LazySession: a running SparkSession
        sparkContext = None

    assert local_cores(Started()) is None


def pids_and_items(items: Iterator[int]) -> Iterator[tuple[int, int]]:
    for item in items:
        yield os.getpid(), item * 10


def test_slices_run_in_forked_processes_and_come_back_in_order() -> None:
    driver: list[int] = []  # the driver's own work while they run (the dump's fresh warm-up)
    result = map_slices(pids_and_items, list(range(7)), 3, meanwhile=lambda: driver.append(os.getpid()))
    assert driver == [os.getpid()]
    assert [value for _, value in result] == [i * 10 for i in range(7)]
    pids = [pid for pid, _ in result]
    assert os.getpid() not in pids
    # contiguous slices, as Spark's parallelize cuts them (0-1, 2-3, 4-6), each in one process
    # (a process that finished its slice may take the next one, as Spark reuses its workers)
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[4] == pids[5] == pids[6]


class Unpicklable(Exception):
    def __init__(self, table: str, *, offsets: str) -> None:  # a keyword pickle cannot replay
        super().__init__(f"{table}: offsets {offsets} are gone")


def fails_unpicklably(items: Iterator[int]) -> Iterator[int]:
    for _ in items:
        raise Unpicklable("events", offsets="[0, 10)")
    yield 0


def fails_plainly(items: Iterator[int]) -> Iterator[int]:
    for _ in items:
        raise ValueError("MARKER: the registry said no")
    yield 0


def dies(items: Iterator[int]) -> Iterator[int]:
    for _ in items:
        os._exit(3)  # a crash point in a task
    yield 0


def test_a_failed_task_fails_the_job_with_its_error_or_its_text() -> None:
    with pytest.raises(ValueError, match="MARKER: the registry said no"):
        map_slices(fails_plainly, [1, 2], 2)
    with pytest.raises(DriverTaskError, match=r"Unpicklable: events: offsets \[0, 10\) are gone") as error:
        map_slices(fails_unpicklably, [1, 2], 2)
    assert "fails_unpicklably" in str(error.value)  # the task's traceback comes along
    with pytest.raises(BrokenProcessPool):
        map_slices(dies, [1, 2], 2)


def waits_for_the_driver(marker: str) -> int:
    """A task that finishes only once the driver's ``meanwhile`` has run: it ran beside it."""
    deadline = time.monotonic() + 30
    while not Path(marker).exists():
        assert time.monotonic() < deadline, "meanwhile never ran while the tasks did"
        time.sleep(0.01)
    return os.getpid()


def test_the_driver_works_beside_forked_tasks_once_every_process_is_forked(tmp_path: Path) -> None:
    """``meanwhile`` runs once in the driver while the tasks run (here they cannot end before
    it), the processes forked before it starts its threads (a warm-up's import)."""
    markers = [str(tmp_path / f"go-{i}") for i in range(3)]
    calls: list[int] = []

    def meanwhile() -> None:
        calls.append(len(multiprocessing.active_children()))  # forked already
        threading.Thread(target=time.sleep, args=(0.2,), name="warm-up").start()
        for marker in markers:
            Path(marker).write_text("")

    pids = map_forked(waits_for_the_driver, markers, 2, meanwhile=meanwhile)
    assert calls == [2] and os.getpid() not in pids and 1 <= len(set(pids)) <= 2
    assert map_forked(waits_for_the_driver, [], 2, meanwhile=meanwhile) == [] and calls == [2, 0]


def memory_pool(_: int) -> str:
    import pyarrow as pa

    return str(pa.default_memory_pool().backend_name)


def test_each_forked_process_is_set_up_first_and_the_driver_keeps_its_own() -> None:
    """The seal's compaction processes take pyarrow's jemalloc pool (``setup``: this build
    has it); the driver's pool is not touched."""
    import pyarrow as pa

    mine = pa.default_memory_pool().backend_name
    assert map_forked(memory_pool, [1, 2, 3], 2, setup=jemalloc_in_a_fresh_process) == ["jemalloc"] * 3
    assert map_forked(memory_pool, [1], 1) == [mine]  # no setup: the driver's default
    assert pa.default_memory_pool().backend_name == mine


def test_a_forked_task_s_error_reaches_the_driver() -> None:
    with pytest.raises(DriverTaskError, match=r"Unpicklable: events: offsets \[0, 10\) are gone"):
        map_forked(lambda_free_failure, [1], 1)


def lambda_free_failure(item: int) -> None:
    raise Unpicklable("events", offsets="[0, 10)")


DRIVER = """
import os, sys, time
from pathlib import Path
from tidemark.driver_tasks import map_slices

def sleeper(items):
    for item in items:
        Path(sys.argv[1], str(os.getpid())).write_text("")
        time.sleep(120)
        yield item

map_slices(sleeper, [1, 2], 2)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_tasks_die_with_a_killed_driver(tmp_path: Path) -> None:
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)])
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.iterdir())) < 2:
            assert driver.poll() is None and time.monotonic() < deadline, "the tasks never started"
            time.sleep(0.05)
        tasks = [int(p.name) for p in tmp_path.iterdir()]
        assert all(alive(pid) for pid in tasks)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in tasks):
            assert time.monotonic() < deadline, "a task outlived its killed driver"
            time.sleep(0.05)
    finally:
        driver.kill()
