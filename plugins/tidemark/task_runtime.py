"""What tidemark's own Python tasks run under: pyarrow without its pandas import.

pyarrow's conversions from Python objects (``pa.array``, ``pa.table`` of lists) import pandas
when it is installed, to recognise its types and missing values: about 1 s of CPU in every
Python worker of every job (measured: a third of the suite's worker CPU), for a library no
task of tidemark's uses. ``arrow_without_pandas`` hides pandas from imports while a task
body runs in a worker that has not loaded it; pyarrow then converts as it does where pandas
is not installed. Only task functions use it (and the seal's driver where it compacts small
hours itself, unless the table's Great Expectations need pandas), so code that hands pandas
objects to pyarrow keeps pyarrow's detection."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class _NoPandas:
    """A meta path finder under which ``import pandas`` fails (pyarrow's C++ layer then
    treats pandas as absent; it tries again on a later conversion, which fails as cheaply)."""

    @staticmethod
    def find_spec(
        name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError(f"{name}: hidden in tidemark's tasks (tidemark.task_runtime)")
        return None


@contextmanager
def arrow_without_pandas() -> Iterator[None]:
    """Hide pandas from imports for the body, unless it is loaded already (then pyarrow may
    as well use it). Re-entrant."""
    if "pandas" in sys.modules or any(isinstance(f, _NoPandas) for f in sys.meta_path):
        yield
        return
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def task_body(func: Callable[P, R]) -> Callable[P, R]:
    """A task function run under ``arrow_without_pandas``; a generator's whole iteration is."""
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def iterate(*args: P.args, **kwargs: P.kwargs) -> Any:
            with arrow_without_pandas():
                yield from func(*args, **kwargs)

        return iterate

    @functools.wraps(func)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with arrow_without_pandas():
            return func(*args, **kwargs)

    return call


def jemalloc_in_a_fresh_process() -> None:
    """pyarrow's jemalloc pool for a process forked to run tasks, where the build has it.
    Why: its default here (mimalloc) pays more for a fresh process's first hundreds of MB. The
    first compaction of an hour (984K rows) in a new process took 1.34-1.47 s on mimalloc
    against 1.01-1.13 s on jemalloc, the second 0.7-0.8 s on either (docs/benchmarks.md,
    session 45). Set before the process allocates anything; a build without jemalloc keeps its
    default."""
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # no jemalloc in this build (Windows)
        return
