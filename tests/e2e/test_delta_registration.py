"""A Delta snapshot's registration when the metastore's database lies on a file system the
job lacks: Spark registers a Delta (non-Hive) table through a placeholder directory under the
database's location, so a job of a local warehouse fails there if ``default`` is on S3 (found
as a CI failure: the test services shared one metastore database). The commit stands and the
log names the cause and the way out."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers.jobs import run_job_process
from tests.helpers.orders import write_parquet_source
from tests.helpers.s3cluster import lake, s3_metastore
from tests.helpers.tables import at, fresh_table
from tidemark.settings import Settings
from tidemark.snapshot.snapshots import SnapshotLog
from tidemark_dev.generator import create_topic, order_changes, state_after

pytestmark = pytest.mark.e2e
__all__ = ["lake", "s3_metastore"]  # module-scoped fixtures of this module's test


def test_a_database_on_a_file_system_the_job_lacks_is_named_and_the_commit_stands(
    broker: str, settings: Settings, s3_metastore: Settings, tmp_path: Path
) -> None:
    home = tmp_path / "home"  # a local warehouse; the metastore service's default database is on S3
    local = replace(settings, home=home, warehouse=str(home / "warehouse"))
    config, own = fresh_table(local, tmp_path, template="orders", cdc__snapshot_format="delta")
    own = replace(own, hive_metastore_uris=s3_metastore.hive_metastore_uris)
    create_topic(broker, config.source.topic, 2)
    state = state_after(order_changes(30, start=at(9), seed=3))
    source = write_parquet_source(tmp_path / "src", state)
    args = [
        "--source-kind",
        "parquet",
        "--source",
        str(source),
        "--label",
        "base",
        "--as-of",
        at(10).isoformat(),
    ]
    code, out, err = run_job_process(own, "bootstrap", config.table, "boot-1", *args)
    assert code == 0, err[-3000:]
    (record,) = SnapshotLog(own.state_location, config.table).records()
    assert (record.label, record.rows) == ("base", len(state))  # committed, although not registered
    log = out + err
    assert f"registering default.{config.snapshot_table} failed" in log
    assert "S3AFileSystem not found" in log
    assert "placeholder directory under the database's location (s3a://" in log
