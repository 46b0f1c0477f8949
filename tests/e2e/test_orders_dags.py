"""The orders path through Airflow (dag.test, real spark-submit processes): the bootstrap DAG
reads PostgreSQL with the credentials of an Airflow connection (never rendered or stored),
the ingest DAG seals the increments, the merge DAG builds the snapshot, and a late change
makes the ingest DAG trigger a re-merge of the stale snapshot."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.helpers.dags import run_dag
from tests.helpers.orders import late_update, normal, send, truth
from tests.helpers.tables import at, fresh_table
from tidemark.observe.lineage import job_lineage
from tidemark.settings import Settings
from tidemark.snapshot.snapshots import SnapshotLog
from tidemark.time.instants import as_utc
from tidemark_dev.generator import create_topic, order_changes, state_after
from tidemark_dev.pgsource import ORDERS_COLUMNS, ORDERS_DDL, psql, replace_table

pytestmark = pytest.mark.e2e

SECRET = "e2e-Secret-7f3a"


def rendered_fields(dag_id: str) -> str:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rtif
    from airflow.utils.session import create_session

    with create_session() as session:
        return " ".join(
            json.dumps(r.rendered_fields, default=str) for r in session.query(Rtif).filter_by(dag_id=dag_id)
        )


def snapshot_rows(settings: Settings, table: str, label: str) -> list[tuple[Any, ...]]:
    """The snapshot partition's files (this test's Derby belongs to its spark-submit jobs)."""
    import pyarrow.parquet as pq

    rows = []
    for path in (Path(settings.warehouse) / f"{table}_snapshot" / f"snapshot_dt={label}").glob("*.parquet"):
        for row in pq.read_table(path).to_pylist():
            when = as_utc(row["updated_at"])  # Spark writes INT96: read back naive, in UTC
            rows.append(normal({**row, "updated_at": when.isoformat()}))
    return sorted(rows)


def test_bootstrap_from_postgres_then_merge_and_remerge_through_airflow(
    dag_env: Settings,
    broker: str,
    postgres: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, settings = fresh_table(
        dag_env, tmp_path, template="orders", retries=1, retry_delay="0s", cdc__snapshot_every="hour"
    )
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(settings.conf_dir))
    table = config.table
    create_topic(broker, config.source.topic, 2)
    before = order_changes(80, start=at(9), seed=21)
    source_state = state_after(before)
    send(broker, config, before)
    replace_table(settings, f"{table}_src", ORDERS_DDL, ORDERS_COLUMNS, source_state.values())
    # The connection the trigger form names by default holds the only copy of the password.
    psql(settings, f"CREATE ROLE reader LOGIN PASSWORD '{SECRET}'; GRANT SELECT ON {table}_src TO reader")
    conn = {"conn_type": "postgres", "login": "reader", "password": SECRET}
    monkeypatch.setenv(f"AIRFLOW_CONN_TIDEMARK_{table.upper()}_SOURCE", json.dumps(conn))
    monkeypatch.delenv("TIDEMARK_SOURCE_PASSWORD", raising=False)

    form = {
        "source_kind": "jdbc",
        "source": postgres,
        "source_table": f"{table}_src",
        "partition_column": "order_id",
        "num_partitions": 2,
        "snapshot_label": "base",
    }
    states = run_dag(f"tidemark_bootstrap_{table}", at(10), form)
    assert states == {"bootstrap": "success"}
    (record,) = SnapshotLog(settings.state_location, table).records()
    assert (record.label, record.kind, record.rows) == ("base", "bootstrap", len(source_state))
    assert sum(record.aligned_offsets.values()) == len(before)
    assert SECRET not in rendered_fields(f"tidemark_bootstrap_{table}")
    assert snapshot_rows(settings, table, "base") == truth(source_state)

    after = order_changes(60, start=at(10), span=at(11, 30) - at(10), existing=source_state, seed=22)
    send(broker, config, after, duplicates=0.1)
    assert run_dag(f"tidemark_ingest_{table}", at(11, 40))["seal"] == "success"
    states = run_dag(f"tidemark_merge_{table}", at(11, 45), {"snapshot": "2026-11-22T10"})
    assert states == {"merge": "success"}
    hour_10 = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(11)], source_state
    )
    assert snapshot_rows(settings, table, "2026-11-22T10") == truth(hour_10)
    check_snapshot_lineage(config, settings, postgres)

    # A change of 10:30 arrives after hour 10 was sealed: amend, then the ingest run finds the
    # snapshot stale and triggers the merge DAG for it.
    victim = min(hour_10)
    late = late_update(hour_10[victim], at(10, 30), version=500)
    send(broker, config, [late])
    states = run_dag(f"tidemark_ingest_{table}", at(11, 50))
    assert (states["find_stale_snapshot"], states["remerge"]) == ("success", "success")
    from airflow.models.dagrun import DagRun
    from airflow.utils.types import DagRunTriggeredByType

    triggered = [
        r.conf
        for r in DagRun.find(dag_id=f"tidemark_merge_{table}")
        if r.triggered_by == DagRunTriggeredByType.OPERATOR
    ]
    assert triggered == [{"snapshot": "2026-11-22T10"}]


def check_snapshot_lineage(config: Any, settings: Settings, source_url: str) -> None:
    """The lineage the bootstrap and merge tasks report (read back from their snapshot
    records): the source table without credentials and the topic position it aligned to;
    the increment hour and the base snapshot into the new snapshot partition."""

    records = {r.kind: r for r in SnapshotLog(settings.state_location, config.table).records()}
    boot = job_lineage("bootstrap", config, settings, records["bootstrap"].run_id)
    url = urlparse(source_url.removeprefix("jdbc:"))
    source, topic = boot.inputs
    assert (source.namespace, source.name) == (
        f"{url.scheme}://{url.netloc}",
        f"{url.path.strip('/')}.{config.table}_src",
    )
    assert topic.name == config.source.topic and sum(r["end"] for r in topic.offsets) == sum(
        records["bootstrap"].aligned_offsets.values()
    )
    (snapshot,) = boot.outputs
    assert (snapshot.name, snapshot.partitions) == (
        f"default.{config.table}_snapshot",
        ({"snapshot_dt": "base"},),
    )
    assert SECRET not in json.dumps([asdict(d) for d in (*boot.inputs, *boot.outputs)])

    merged = job_lineage("merge", config, settings, records["merge"].run_id)
    hours, base = merged.inputs
    read = sorted(key for key, version in records["merge"].hours.items() if version)  # 09 (margin) and 10
    assert hours.name == f"default.{config.table}" and "2026-11-22T10" in read
    assert [f"{p['dt']}T{p['hr']}" for p in hours.partitions] == read
    assert (base.name, base.partitions) == (f"default.{config.table}_snapshot", ({"snapshot_dt": "base"},))
    assert merged.outputs[0].partitions == ({"snapshot_dt": "2026-11-22T10"},)
