"""The production topology for e2e tests: a fresh prefix of the S3 test bucket, the metastore
service for a warehouse there, a standalone cluster of a master and two workers, and the real
jobs run as their own processes against them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tests.helpers.jobs import JOBS, job_env
from tests.helpers.metastore import metastore_service
from tidemark.settings import Settings
from tidemark.tablefs import Store
from tidemark_dev.cluster import SparkMasterService, SparkWorkerService, master_url
from tidemark_dev.net import free_port_block
from tidemark_dev.pgsource import psql
from tidemark_dev.postgres import metastore_database


@pytest.fixture(scope="module")
def lake(s3: str) -> str:
    """A fresh prefix of the test bucket."""
    return f"{s3}/{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def s3_metastore(
    settings: Settings, postgres: str, lake: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """The metastore service for a warehouse on S3 (s3a on its class path, keys from the
    environment); yields settings pointing at both."""
    with metastore_service(
        replace(settings, warehouse=f"{lake}/warehouse", state_uri=f"{lake}/state")
    ) as own:
        yield own


@pytest.fixture(scope="module")
def cluster(s3_metastore: Settings) -> Iterator[Settings]:
    """A standalone master and two workers; settings whose jobs run on them and ship
    ``make executor-env``'s archive."""
    archive = Path(s3_metastore.python).parent.parent / "share" / "tidemark" / "executor-env.tar.gz"
    assert archive.is_file(), "run `make executor-env` (make test does)"
    own = replace(s3_metastore, spark_port=free_port_block(6))
    nodes = [SparkMasterService(own), *(SparkWorkerService(own, i) for i in (1, 2))]
    try:
        for node in nodes:
            node.start()
        yield replace(
            own,
            spark_master=master_url(own),
            executor_env=str(archive),
            executor_env_cache=str(own.home / "executor-env-cache"),  # the "node's", per module
        )
    finally:
        for node in reversed(nodes):
            node.stop()


def job(
    settings: Settings,
    name: str,
    table: str,
    run_id: str,
    *extra: str,
    fail_at: str | None = None,
    env_extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {**job_env(settings, fail_at), **(env_extra or {})}
    args = [sys.executable, str(JOBS / f"{name}.py"), "--table", table, "--run-id", run_id, *extra]
    started = time.monotonic()
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=400, check=False)
    print(f"{name} {run_id} {fail_at or ''}: {time.monotonic() - started:.1f} s")
    (Path("/tmp") / f"job-{name}-{run_id}-{fail_at}.log").write_text(done.stderr)
    return done


def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """A successful job's result (its last line of output)."""
    assert done.returncode == 0, why(done)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def why(done: subprocess.CompletedProcess[str]) -> str:
    """A failed job's error lines (not its stack frames) and the end of its log."""
    errors = [x for x in done.stderr.splitlines() if ("Error" in x or "Exception" in x) and "\tat " not in x]
    return "\n".join(errors[:15]) + "\n...\n" + done.stderr[-1500:]


def registered(settings: Settings, table: str) -> dict[str, str]:
    """Partition -> location, from the metastore service's own database."""
    query = (
        'SELECT p."PART_NAME", s."LOCATION" FROM "PARTITIONS" p JOIN "TBLS" t ON p."TBL_ID" = t."TBL_ID" '
        f'JOIN "SDS" s ON p."SD_ID" = s."SD_ID" WHERE t."TBL_NAME" = \'{table}\''
    )
    out = psql(settings, query, database=metastore_database(settings))
    return dict(line.split("|", 1) for line in out.splitlines() if line)


def rows_at(settings: Settings, locations: dict[str, str]) -> Counter[tuple[int, int]]:
    """What a reader of the metastore finds: the rows of every file under every location."""
    store = Store.of(settings.warehouse)
    prefix = f"s3a://{settings.warehouse.removeprefix('s3://')}/"
    assert all(loc.startswith(prefix) for loc in locations.values()), locations
    files = [f for loc in locations.values() for f in store.files(loc.removeprefix(prefix))]
    return offsets(store, files, ("_mq_partition", "_mq_offset"))


def offsets(store: Store, files: list[str], columns: tuple[str, str]) -> Counter[tuple[int, int]]:
    found: Counter[tuple[int, int]] = Counter()
    for relative in files:
        with store.fs.open_input_file(store.path(relative)) as handle:
            t = pq.read_table(handle, columns=list(columns))
        found.update(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))
    return found
