"""tidemark's Python tasks run pyarrow without its pandas import (tidemark/task_runtime.py),
checked in a fresh interpreter: the test process has pandas loaded already."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PROGRAM = textwrap.dedent(
    """
    import datetime, decimal, json, sys
    from tidemark.task_runtime import task_body

    @task_body
    def task(rows):
        import pyarrow as pa
        import pyarrow.parquet as pq
        for row in rows:
            table = pa.table({"n": [row, None], "t": [datetime.datetime(2026, 11, 22, 10), None],
                              "d": [decimal.Decimal("1.50"), None], "s": ["x", None]})
            pq.write_table(table, sys.argv[1])
            yield "pandas" in sys.modules, pq.read_table(sys.argv[1]).to_pylist()

    seen = list(task([1, 2]))
    import pandas  # a driver's own use after the task: unaffected
    import pyarrow as pa
    frame = pa.table({"n": [1]}).to_pandas()
    print(json.dumps({"seen": seen, "after": type(frame).__name__}, default=str))
    """
)


def test_a_task_converts_with_pyarrow_without_importing_pandas(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path / "t.parquet")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert [loaded for loaded, _ in result["seen"]] == [False, False]
    assert result["seen"][1][1][0] == {"n": 2, "t": "2026-11-22 10:00:00", "d": "1.50", "s": "x"}
    assert result["seen"][1][1][1] == {"n": None, "t": None, "d": None, "s": None}
    assert result["after"] == "DataFrame"
