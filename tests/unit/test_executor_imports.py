"""A cluster's executors run tidemark's task functions from the executor venv archive
(``scripts/build_executor_env.sh``), which holds only the packages the tasks need. A module
whose tasks they run must import with those alone: a driver-only package imported at the top
of one (psutil, once, in ``tidemark.stopwatch``) fails every task of a cluster job, while a
local job, whose workers use the whole venv, passes."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# the modules whose functions Spark's executors run (tasks, data sources, UDFs), and theirs
EXECUTOR_MODULES = (
    "tidemark.ingest.dump",
    "tidemark.ingest.staging",
    "tidemark.ingest.staged",
    "tidemark.ingest.reader",
    "tidemark.ingest.source",
    "tidemark.ingest.replay",
    "tidemark.stream.source",
    "tidemark.sparkfiles",
    "tidemark.seal.hour_tasks",
    "tidemark.seal.sealing",
    "tidemark.seal.rebuild",
    "tidemark.seal.recompact",
    "tidemark.snapshot.merge",
)
# on every executor besides the archive: the library itself and Spark's own Python
ALWAYS = {"tidemark", "pyspark", "py4j"}

PROBE = """
import importlib, importlib.abc, sys
allowed = set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in allowed or top.startswith("_"):
            return None
        raise ImportError(f"{name} is not in the executor venv archive")
sys.meta_path.insert(0, Block())
for module in sys.argv[2:]:
    importlib.import_module(module)
"""


def _archived() -> set[str]:
    """The import names of the distributions the executor archive installs."""
    script = (ROOT / "scripts" / "build_executor_env.sh").read_text()
    wanted = re.search(r"wanted='\^\(([^)]*)\)==", script)
    assert wanted, "scripts/build_executor_env.sh no longer names its packages as this test reads them"
    names = {n.lower().replace("_", "-") for n in wanted.group(1).split("|")}
    return {
        top
        for top, dists in packages_distributions().items()
        if any(d.lower().replace("_", "-") in names for d in dists)
    }


def test_the_modules_executors_run_import_with_the_executor_archive_alone() -> None:
    allowed = ",".join(sorted(_archived() | ALWAYS))
    found = subprocess.run(
        [sys.executable, "-c", PROBE, allowed, *EXECUTOR_MODULES], capture_output=True, text=True, check=False
    )
    assert found.returncode == 0, found.stderr[-2000:]


def test_the_check_refuses_a_package_outside_the_archive() -> None:
    """The probe itself: a driver-only package is refused."""
    allowed = ",".join(sorted(_archived() | ALWAYS))
    found = subprocess.run(
        [sys.executable, "-c", PROBE + "\nimport psutil\n", allowed],
        capture_output=True,
        text=True,
        check=False,
    )
    assert found.returncode != 0 and "psutil is not in the executor venv archive" in found.stderr
