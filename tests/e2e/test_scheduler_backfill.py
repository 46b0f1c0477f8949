"""End to end on a real scheduler: `airflow standalone` (own home and port, LocalExecutor),
the table's DAGs unpaused, ingest triggered through the REST API with a JWT, a cleared dump
task re-run, then `airflow backfill create` over two of its three hours on the rebuild DAG, each run
noted with the hour it rebuilds.
The data is identical before and after, the hour left out keeps its seal, every rebuilt hour
is re-announced with a new version, and `tidemark status` agrees. Everything started here is
stopped by PID."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq  # noqa: TID253
import pytest

from tests.helpers.airflow_api import AirflowApi, wait_for
from tests.helpers.tables import fresh_table
from tidemark.config import TableConfig, load_table_file
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark.time.hours import hour_of
from tidemark_dev.airflow_env import admin_password, airflow_environment
from tidemark_dev.generator import create_topic, produce, records
from tidemark_dev.net import free_port
from tidemark_dev.services import AirflowService

pytestmark = pytest.mark.e2e

RUN_TIMEOUT = 600.0


@pytest.fixture
def stack(
    broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[AirflowService, AirflowApi]]:
    """Airflow standalone with its own TIDEMARK_HOME (own Derby) and one fresh table; the
    OpenLineage provider writes its events to ``lineage.jsonl`` (its file transport)."""
    transport = {"type": "file", "log_file_path": str(tmp_path / "lineage.jsonl"), "append": True}
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps(transport))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "tidemark-test")
    home = tmp_path / "home"
    own = replace(settings, home=home, warehouse=str(home / "warehouse"), airflow_port=free_port())
    _, own = fresh_table(own, tmp_path, retries=2, retry_delay="2s")
    service = AirflowService(own)
    family: list[psutil.Process] = []
    try:
        status = service.start()
        assert status.pid
        password = admin_password(own)
        assert password
        yield service, AirflowApi(service.address(), password)
        root = psutil.Process(status.pid)
        family = [root, *root.children(recursive=True)]
    finally:
        service.stop()
    alive = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"processes left behind: {alive}"


def hour_rows(settings: Settings, table: str, hour_path: str) -> list[tuple[Any, ...]]:
    """The rows of an hour's published files, sorted."""
    rows: list[tuple[Any, ...]] = []
    for path in sorted((Layout(settings, table).table_dir / hour_path).rglob("*.parquet")):
        frame = pq.read_table(path).to_pylist()
        rows.extend(tuple(sorted(r.items())) for r in frame)
    return sorted(rows)


def finished(api: AirflowApi, dag_id: str, run_id: str) -> str | None:
    state = api.run_state(dag_id, run_id)
    return state if state in ("success", "failed") else None


def test_trigger_clear_and_backfill_rebuild_on_the_real_scheduler(
    stack: tuple[AirflowService, AirflowApi], broker: str
) -> None:
    service, api = stack
    settings = service.settings
    (config_file,) = settings.conf_dir.glob("*.yaml")

    config: TableConfig = load_table_file(config_file)
    table, topic = config.table, config.source.topic
    ingest, rebuild = f"tidemark_ingest_{table}", f"tidemark_rebuild_{table}"

    # Three full hours that end well before now: every hour up to them can be sealed, none
    # is overdue (the ingest run's check_deadlines would fail the run).
    now = datetime.now(UTC)
    # They also end before the latest complete interval [H-1, H): the scheduler makes its own
    # rebuild run for that one at unpause (skipped, nothing sealed yet), and a backfill over it
    # would find that run instead of making one (seen in CI at minute 38).
    last_end = hour_of(now, "UTC").start - timedelta(hours=1)
    first = last_end - timedelta(hours=3)
    create_topic(broker, topic, 2)
    events = [(p, first + timedelta(minutes=m)) for p in (0, 1) for m in range(0, 180, 12)]
    events += [(0, now - timedelta(minutes=12)), (1, now - timedelta(minutes=12))]  # push watermarks
    sent = produce(broker, topic, records(events))

    wait_for(f"{ingest} parsed", lambda: _dag_exists(api, ingest), 180)
    wait_for(f"{rebuild} parsed", lambda: _dag_exists(api, rebuild), 60)
    for dag_id in (ingest, rebuild):
        api.patch(f"dags/{dag_id}", {"is_paused": False})

    run = api.post(f"dags/{ingest}/dagRuns", {"logical_date": None, "conf": {}})
    run_id = run["dag_run_id"]
    state = wait_for(f"{ingest} run {run_id}", lambda: finished(api, ingest, run_id), RUN_TIMEOUT, 5)
    assert state == "success", api.task_states(ingest, run_id)
    hours = [(first + timedelta(hours=i)) for i in range(3)]
    keys = [hour_of(h, "UTC").key for h in hours]
    paths = [hour_of(h, "UTC").path for h in hours]
    journal = HourJournal(settings.state_location, table)
    sealed = {k: e for k, e in journal.state().hours.items() if e.kind == "seal"}
    assert set(keys) <= set(sealed), sealed.keys()
    before = {p: hour_rows(settings, table, p) for p in paths}
    assert sum(len(r) for r in before.values()) == 30

    def commits_of(run: str) -> list[int]:
        return [
            c.batch_id for c in CommitLog(settings.state_location, table).iter_commits() if c.run_id == run
        ]

    (batch_of_run,) = commits_of(run_id)
    check_lineage(settings.home.parent / "lineage.jsonl", config, settings, len(sent), keys)

    # Clearing the (successful) dump task re-runs it: the committed batch is a no-op.
    api.post(
        f"dags/{ingest}/clearTaskInstances",
        {"dag_run_id": run_id, "task_ids": ["dump"], "dry_run": False, "only_failed": False},
    )
    wait_for(
        "the cleared dump to run again", lambda: api.task_states(ingest, run_id)["dump"] != "success", 60, 1
    )
    state = wait_for(
        f"{ingest} run {run_id} after clear", lambda: finished(api, ingest, run_id), RUN_TIMEOUT, 5
    )
    assert state == "success", api.task_states(ingest, run_id)
    # The re-run found its batch committed; scheduled runs meanwhile may have added empty batches.
    assert commits_of(run_id) == [batch_of_run]
    assert CommitLog(settings.state_location, table).state().rows == len(sent)
    assert {p: hour_rows(settings, table, p) for p in paths} == before

    # Backfill the rebuild DAG over the last two hours (from/to are inclusive logical dates;
    # the first hour stays as sealed).
    rebuilt = hours[1:]
    env = airflow_environment(settings)
    airflow = str(Path(sys.executable).parent / "airflow")
    command = [
        airflow,
        "backfill",
        "create",
        "--dag-id",
        rebuild,
        "--from-date",
        rebuilt[0].isoformat(),
        "--to-date",
        rebuilt[-1].isoformat(),
        "--reprocess-behavior",
        "completed",
    ]
    # The CLI writes to the same SQLite file as the running scheduler: under load it can lose
    # the write lock ("database is locked", seen in CI); the creation is one transaction, so
    # a retry is safe unless the backfill exists already.
    for _ in range(3):
        created = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
        output = created.stdout[-2000:] + created.stderr[-2000:]
        if created.returncode == 0 or api.get(f"backfills?dag_id={rebuild}")["backfills"]:
            break
        assert "database is locked" in output, output
        time.sleep(5)

    (backfill,) = api.get(f"backfills?dag_id={rebuild}")["backfills"]
    wait_for(
        "the backfill to complete",
        lambda: api.get(f"backfills/{backfill['id']}")["completed_at"],
        RUN_TIMEOUT,
        5,
    )
    # One run per hour [H, H+1h); an hour whose scheduled run already existed is re-run in place.
    runs = api.get(f"dags/{rebuild}/dagRuns?limit=50")["dag_runs"]
    by_hour = {r["data_interval_start"][:13]: r for r in runs if r["data_interval_start"]}
    for hour in rebuilt:
        r = by_hour[hour.strftime("%Y-%m-%dT%H")]
        assert r["state"] == "success", (r["dag_run_id"], api.task_states(rebuild, r["dag_run_id"]))
        assert api.task_states(rebuild, r["dag_run_id"])["rebuild"] == "success"
        # The scheduler's listener (tidemark.airflow.run_notes) named the hour on the run.
        key = hour_of(hour, "UTC").key
        assert r["note"] == f"Rebuilds {table} hour {key} (backfill {backfill['id']})", r

    after = {p: hour_rows(settings, table, p) for p in paths}
    assert after == before
    state_after = journal.state()
    rebuilt_keys = [hour_of(h, "UTC").key for h in rebuilt]
    for key in rebuilt_keys:
        entry = state_after.hours[key]
        assert entry.kind == "rebuild" and entry.version >= 2, entry
    assert state_after.hours[keys[0]].kind == "seal"  # outside the backfill's range

    events_out = api.get("assets/events?limit=100&order_by=-timestamp")["asset_events"]
    announced = {
        (e["partition_key"], (e.get("extra") or {}).get("versions", {}).get(e["partition_key"]))
        for e in events_out
        if e["name"] == f"tidemark.{table}"
    }
    for key in rebuilt_keys:
        assert (key, 1) in announced and (key, state_after.hours[key].version) in announced, announced

    status = subprocess.run(
        [str(Path(sys.executable).parent / "tidemark"), "status", "--table", table, "--json"],
        env={**env, "TIDEMARK_CONF_DIR": str(settings.conf_dir)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    info = json.loads(status.stdout)
    assert info["rows"] + info["dirty"] == len(sent) and info["dirty"] == 0
    assert set(rebuilt_keys) <= set(info["hours_rebuilt"])
    assert {p["lag"] for p in info["partitions"].values()} == {0}


def _dag_exists(api: AirflowApi, dag_id: str) -> bool:
    dags = api.get(f"dags?dag_id_pattern={dag_id}")["dags"]
    return any(d["dag_id"] == dag_id for d in dags)


def check_lineage(
    path: Path, config: TableConfig, settings: Settings, records: int, hours: list[str]
) -> None:
    """The OpenLineage listener's COMPLETE events of the ingest DAG's dump and seal tasks, one
    per task run (scheduled runs included): each dump names the topic with the offsets its own
    batch read (its commit record), together every record sent; each seal the table with the
    hours it sealed, together at least ``hours``."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    log = CommitLog(settings.state_location, config.table)
    read = 0
    sealed: set[str] = set()
    for event in events:
        dag_id, _, task = event["job"]["name"].partition(".")
        if event["eventType"] != "COMPLETE" or dag_id != f"tidemark_ingest_{config.table}":
            continue
        if task == "dump":
            run = event["run"]["facets"]["airflow"]["dagRun"]["run_id"]
            (topic,) = event["inputs"]
            assert (topic["namespace"], topic["name"]) == (
                f"kafka://{settings.kafka_bootstrap}",
                config.source.topic,
            )
            batch = log.batch_of_run(run)
            commit = log.commit(batch) if batch is not None else None
            assert commit is not None, run
            ranges = topic["inputFacets"]["tidemark_kafkaOffsets"]["ranges"]
            assert ranges == [
                {"partition": r.mq_partition, "start": r.start, "end": r.end} for r in commit.ranges
            ]
            read += sum(r["end"] - r["start"] for r in ranges)
            (table,) = event["outputs"]
            assert table["name"] == f"default.{config.table}" and table["namespace"].startswith("hive://")
        elif task == "seal" and event["outputs"]:
            (table,) = event["outputs"]
            partitions = table["outputFacets"]["subset"]["outputCondition"]["partitions"]
            sealed |= {f"{p['dimensions']['dt']}T{p['dimensions']['hr']}" for p in partitions}
    assert read == records, (read, records)
    assert set(hours) <= sealed, (hours, sealed)
