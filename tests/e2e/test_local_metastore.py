"""The local deployment's metastore (`make up`'s ``derby-metastore``): a Hive metastore
service over the home's own Derby database. While it runs, every process of the home finds
it (no variable set) and a seal registers its hours over Thrift without starting a JVM; once
it stops, the jobs open the same database embedded and see the same table and partitions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tests.helpers.jobs import job_process, job_result, run_job_process
from tests.helpers.tables import at, fresh_table
from tidemark.faults import EXIT_CODE, SEAL_POINTS
from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.ingest.dump import run_dump
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark_dev.derby_metastore import DerbyMetastoreService
from tidemark_dev.generator import create_topic, produce, records
from tidemark_dev.net import free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
def home(settings: Settings, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A home of its own, its environment without TIDEMARK_HIVE_METASTORE_URIS (the jobs find
    the service, or its database, by themselves)."""
    env = {k: v for k, v in os.environ.items() if k != "TIDEMARK_HIVE_METASTORE_URIS"}
    env.update(
        {
            "TIDEMARK_HOME": str(tmp_path / "home"),
            "TIDEMARK_CONF_DIR": str(tmp_path / "conf"),
            "TIDEMARK_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "TIDEMARK_METASTORE_PORT": str(free_port()),
        }
    )
    service = DerbyMetastoreService(Settings.from_env(env))
    try:
        yield env
    finally:
        service.stop()


def tidemark(env: dict[str, str], *args: str) -> str:
    """The CLI in ``env``; its output (stdout and stderr), a failure shown whole."""
    command = [str(Path(sys.executable).parent / "tidemark"), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=420, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    return out


def test_one_database_with_or_without_its_service_and_no_jvm_for_a_seal_while_it_runs(
    spark: Any, broker: str, home: dict[str, str], tmp_path: Path
) -> None:
    own = Settings.from_env(home)
    assert own.hive_metastore_uris == ""  # nothing runs: embedded Derby
    service = DerbyMetastoreService(own)
    service.start()
    own = Settings.from_env(home)
    assert own.hive_metastore_uris == service.address()  # found through its pid file

    config, own = fresh_table(own, tmp_path)
    create_topic(broker, config.source.topic, 2)
    hour_10 = [(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 15)]
    produce(broker, config.source.topic, records([*hour_10, (0, at(11, 50)), (1, at(11, 45))]))
    run_dump(spark, config, own, "run-1", at(12))  # the dump does not use the metastore
    first = tidemark(home, "seal", "--table", config.table, "--run-id", "seal-1")
    assert job_result(first)["sealed"] == ["2026-11-22T10"]
    assert job_result(first)["spark_started"] is True  # the table's creation, once

    more = [(0, at(11, 5)), (1, at(11, 20)), (0, at(12, 50)), (1, at(12, 45))]
    produce(broker, config.source.topic, records(more, prefix="s"))
    run_dump(spark, config, own, "run-2", at(13))
    second = tidemark(home, "seal", "--table", config.table, "--run-id", "seal-2")
    assert job_result(second)["sealed"] == ["2026-11-22T11"]
    assert job_result(second)["spark_started"] is False, second[-3000:]
    assert f"{config.table}: registering partitions over the metastore service's Thrift API" in second

    # the service stopped, its database is the jobs' own again: the same table, both hours
    assert service.stop()
    assert Settings.from_env(home).hive_metastore_uris == ""
    verified = tidemark(home, "verify", "--table", config.table)  # through the Hive client: Derby
    assert job_result(verified)["ok"] is True, verified[-3000:]
    print(verified[-3000:])
    journal = HourJournal(own.state_dir, config.table).state().hours
    assert journal["2026-11-22T10"].rows == 8 and journal["2026-11-22T11"].rows == 4


def stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP): its state in /proc is ``T``."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def hour_offsets(settings: Settings, table: str, table_format: str, hour: str) -> list[int]:
    """The MQ offsets of an hour's rows as readers see them: every Parquet file of a Hive
    hour's directory (the renaming layout keeps no other version there), the Iceberg table's
    current snapshot."""
    if table_format == "iceberg":
        scan = open_catalog(settings).load_table(identifier(table)).scan(row_filter=f"hr = '{hour}'")
        return list(scan.to_arrow().column("_mq_offset").to_pylist())
    hour_dir = Path(settings.warehouse) / table / "dt=2026-11-22" / f"hr={hour}"
    files = sorted(hour_dir.rglob("*.parquet"))
    return [o for f in files for o in pq.read_table(f, columns=["_mq_offset"]).column(0).to_pylist()]


@pytest.mark.parametrize(
    ("table_format", "target_size"), [("hive", None), ("iceberg", None), ("hive", "4KiB")], ids=str
)
def test_the_seal_without_spark_survives_its_crash_points_and_fences_a_frozen_zombie(
    spark: Any,
    broker: str,
    home: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    table_format: str,
    target_size: str | None,
) -> None:
    """The seal's path that starts no JVM (a Hive table's registration over Thrift, an
    Iceberg table's commit through its catalog; with a target size near the hours' one batch
    file, the hours adopted as they are, not rewritten): killed at each of its points in turn,
    then retried; and a seal frozen mid-compaction past its lease while another run seals the
    hour, then thawed: it publishes nothing. Every hour is sealed once, with exact rows."""
    service = DerbyMetastoreService(Settings.from_env(home))
    service.start()
    sizes = {"output__target_file_size": target_size} if target_size else {}
    config, own = fresh_table(Settings.from_env(home), tmp_path, output__table_format=table_format, **sizes)
    create_topic(broker, config.source.topic, 1)
    minutes = range(0, 60, 2)
    produce(broker, config.source.topic, records([(0, at(9, m)) for m in minutes] + [(0, at(10, 58))]))
    run_dump(spark, config, own, "run-1", at(11))
    assert job_result(tidemark(home, "seal", "--table", config.table, "--run-id", "seal-1"))["sealed"] == [
        "2026-11-22T09"
    ]  # the table created (Spark, once)

    produce(
        broker,
        config.source.topic,
        records([(0, at(10, m)) for m in minutes[:-1]] + [(0, at(11, 58))], prefix="b"),
    )
    run_dump(spark, config, own, "run-2", at(12))
    for point in SEAL_POINTS:
        code, _, err = run_job_process(own, "seal", config.table, "seal-2", fail_at=point)
        assert code == EXIT_CODE, f"{point}: {err[-2000:]}"
        assert "starting Spark" not in err, point
    code, out, err = run_job_process(own, "seal", config.table, "seal-2")
    assert code == 0, err[-3000:]
    assert job_result(out)["sealed"] == ["2026-11-22T10"]
    assert not job_result(out)["spark_started"], [
        line for line in err.splitlines() if "starting Spark" in line
    ]

    produce(
        broker,
        config.source.topic,
        records([(0, at(11, m)) for m in minutes[:-1]] + [(0, at(12, 30))], prefix="c"),
    )
    run_dump(spark, config, own, "run-3", at(13))
    monkeypatch.setenv("TIDEMARK_LOCK_LEASE_S", "2")  # the jobs' from here on
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "pause")
    zombie = job_process(own, "seal", config.table, "seal-3", fail_at="mid_compaction")
    monkeypatch.delenv("TIDEMARK_FAIL_MODE")
    try:
        deadline = time.monotonic() + 120
        while not stopped(zombie.pid):
            assert zombie.poll() is None and time.monotonic() < deadline, "the zombie never froze"
            time.sleep(0.1)
        code, out, err = run_job_process(own, "seal", config.table, "seal-4")
        assert code == 0, err[-3000:]
        assert job_result(out)["sealed"] == ["2026-11-22T11"]
        assert ("hour 2026-11-22T11 adopts its" in err) == bool(target_size), err[-3000:]
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
    _, err = zombie.communicate(timeout=300)
    assert zombie.returncode != 0 and "LeaseLostError" in err, err[-3000:]

    entries = list(HourJournal(own.state_dir, config.table).entries())
    assert [(e.hour, e.rows) for e in entries] == [
        ("2026-11-22T09", 30),
        ("2026-11-22T10", 30),
        ("2026-11-22T11", 30),
    ]
    for hour in ("09", "10", "11"):
        offsets = hour_offsets(own, config.table, table_format, hour)
        assert len(offsets) == 30 and len(set(offsets)) == 30, hour  # each record once
