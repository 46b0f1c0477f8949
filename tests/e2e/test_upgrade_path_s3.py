"""Delta snapshots where the lake lives: the orders (CDC) path with ``cdc.snapshot_format:
delta`` on S3 (a real SeaweedFS), the metastore service on PostgreSQL and the standalone
cluster. The bootstrap and a merge are killed after their Delta commit and before its record
and retried (the commit is recovered, not made twice); a late change makes the current
version stale and the next merge recomputes it forward; each label and the current version
are read by name through Spark SQL, in a process of its own, and equal the source's state."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.helpers.jobs import job_env
from tests.helpers.orders import Row, late_update, normal, send, truth
from tests.helpers.s3cluster import cluster, job, lake, outcome, s3_metastore, why
from tests.helpers.tables import at, fresh_table
from tidemark.faults import EXIT_CODE
from tidemark.observe.status import render, table_status
from tidemark.settings import Settings
from tidemark.snapshot.bootstrap import PASSWORD_ENV, USER_ENV
from tidemark.snapshot.delta import storage_options
from tidemark.snapshot.snapshots import SnapshotLog
from tidemark.state.layout import Layout
from tidemark_dev.generator import create_topic, order_changes, state_after
from tidemark_dev.pgsource import ORDERS_COLUMNS, ORDERS_DDL, replace_table
from tidemark_dev.postgres import POSTGRES_PASSWORD, POSTGRES_USER

pytestmark = pytest.mark.e2e
__all__ = ["cluster", "lake", "s3_metastore"]  # module-scoped fixtures of this module's tests

ROOT = Path(__file__).resolve().parents[2]


def read_by_name(settings: Settings, relation: str) -> list[Row]:
    """The orders rows of ``relation`` as a Spark SQL user of the metastore service reads
    them (its own process); fails on a duplicated key."""
    query = (
        "SELECT order_id, version, customer_id, status, CAST(amount AS STRING) amount, "
        f"date_format(updated_at, 'yyyy-MM-dd HH:mm:ss.SSSSSS') || 'Z' updated_at FROM {relation}"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.sql_read", query],
        env=job_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, why(done)
    rows = [normal({**r, "updated_at": r["updated_at"].replace(" ", "T")}) for r in json.loads(done.stdout)]
    keys = [r[0] for r in rows]
    assert len(keys) == len(set(keys)), f"{relation}: duplicated keys"
    return sorted(rows)


def test_a_delta_snapshot_on_s3_survives_kills_remerges_forward_and_is_read_by_name(
    broker: str, postgres: str, cluster: Settings, tmp_path: Path
) -> None:
    config, on_cluster = fresh_table(
        cluster, tmp_path, template="orders", cdc__snapshot_every="hour", cdc__snapshot_format="delta"
    )
    on_cluster = replace(on_cluster, home=tmp_path / "home")
    settings = replace(on_cluster, spark_master="local[2]", executor_env="")
    create_topic(broker, config.source.topic, 2)
    table, snapshots = config.table, config.snapshot_table
    uri = Layout(settings, snapshots).uri(Layout(settings, snapshots).table_dir)
    assert uri.startswith("s3://")
    before = order_changes(80, start=at(9), seed=21)
    source_state = state_after(before)
    send(broker, config, before)
    replace_table(settings, table, ORDERS_DDL, ORDERS_COLUMNS, source_state.values())
    secret = {USER_ENV: POSTGRES_USER, PASSWORD_ENV: POSTGRES_PASSWORD}
    boot_args = ["--source-kind", "jdbc", "--source", postgres, "--source-table", table]
    boot_args += ["--label", "base", "--as-of", at(10).isoformat()]

    # killed after the Delta commit, before its record: the retry records it, commits nothing
    killed = job(
        settings, "bootstrap", table, "boot-1", *boot_args, fail_at="after_snapshot_swap", env_extra=secret
    )
    assert killed.returncode == EXIT_CODE, why(killed)
    assert DeltaTable(uri, storage_options=storage_options(uri)).version() == 0
    assert not list(SnapshotLog(settings.state_location, table).records())
    boot = outcome(job(on_cluster, "bootstrap", table, "boot-1", *boot_args, env_extra=secret))
    assert boot["rows"] == len(source_state)
    assert read_by_name(settings, f"`{snapshots}`") == truth(source_state)

    after = order_changes(100, start=at(10), span=at(12, 20) - at(10), existing=source_state, seed=22)
    send(broker, config, after)
    assert outcome(job(settings, "dump", table, "ingest-1", "--processing-time", at(12, 30).isoformat()))
    assert outcome(job(on_cluster, "seal", table, "ingest-1"))["sealed"][-2:] == [
        "2026-11-22T10",
        "2026-11-22T11",
    ]
    killed = job(
        settings, "merge", table, "merge-10", "--snapshot", "2026-11-22T10", fail_at="after_snapshot_swap"
    )
    assert killed.returncode == EXIT_CODE, why(killed)
    assert outcome(job(on_cluster, "merge", table, "merge-10", "--snapshot", "2026-11-22T10"))["version"] == 1
    assert outcome(job(settings, "merge", table, "merge-11", "--snapshot", "2026-11-22T11"))["version"] == 1

    # a change of 10:50 after hour 10 was sealed: amended into hour 10, so 11 is stale; the
    # next merge of 11 recomputes it from the bootstrap and merges the difference forward
    state_at_11 = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(11)], source_state
    )
    victim = max(k for k, r in state_at_11.items() if datetime.fromisoformat(r["updated_at"]) < at(10, 50))
    late = late_update(state_at_11[victim], at(10, 50))
    send(broker, config, [late])
    assert outcome(job(settings, "dump", table, "ingest-2", "--processing-time", at(12, 40).isoformat()))
    assert outcome(job(settings, "seal", table, "ingest-2"))["amended"] == ["2026-11-22T10"]
    remerged = outcome(job(on_cluster, "merge", table, "remerge-11", "--snapshot", "2026-11-22T11"))
    assert (remerged["version"], remerged["base"]) == (2, "base@v1")

    fixed = state_after([late], state_at_11)
    expected_11 = truth(
        state_after([c for c in after if at(11) <= datetime.fromisoformat(c["updated_at"]) < at(12)], fixed)
    )
    records = list(SnapshotLog(settings.state_location, table).records())
    assert [(r.ref, r.delta_version) for r in records] == [
        ("base@v1", 0),
        ("2026-11-22T10@v1", 1),
        ("2026-11-22T11@v1", 2),
        ("2026-11-22T11@v2", 3),
    ]
    assert DeltaTable(uri, storage_options=storage_options(uri)).version() == 3
    assert read_by_name(settings, f"`{snapshots}`") == expected_11
    labels = f"`{snapshots}_labels`"
    assert read_by_name(settings, f"{labels} WHERE snapshot_dt = '2026-11-22T11'") == expected_11
    assert read_by_name(settings, f"{labels} WHERE snapshot_dt = '2026-11-22T10'") == truth(state_at_11)
    assert read_by_name(settings, f"{labels} WHERE snapshot_dt = 'base'") == truth(source_state)

    listed = table_status(config, settings)["snapshots"]
    assert sorted((s["label"], s["version"]) for s in listed) == [
        ("2026-11-22T10", 1),
        ("2026-11-22T11", 2),
        ("base", 1),
    ]
    assert "; Delta version 3" in render(table_status(config, settings))
    store = Layout(settings, snapshots).store
    assert not [f for f in store.all_files(snapshots) if "snapshot_dt=" in f]  # staged rows dropped
    assert not (settings.home / "warehouse").exists()  # nothing of the table on the local disk
