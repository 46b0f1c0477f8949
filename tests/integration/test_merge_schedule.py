"""The merge DAG's schedule as Airflow's scheduler runs it: the DAGs are synced to the metadata
DB as the DAG processor does, hourly events of the orders asset are registered with the
announce task's partition keys, and the scheduler's own partitioned-asset step creates the
merge runs: one for a day once all 24 of its hours are in, none before, with the day as the
run's partition key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

DAGS = Path(__file__).resolve().parents[2] / "dags"
MERGE = "tidemark_merge_orders"


def merge_runs() -> list[tuple[str | None, str]]:
    from airflow.models.dagrun import DagRun

    return sorted((r.partition_key, str(r.run_type)) for r in DagRun.find(dag_id=MERGE))


def test_the_scheduler_starts_one_merge_run_per_day_once_its_24_hours_are_sealed(airflow_db: None) -> None:
    from airflow.assets.manager import AssetManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.asset import AssetModel
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    bag = DagBag(dag_folder=str(DAGS))
    assert MERGE in bag.dags
    from airflow.dag_processing.bundles.manager import DagBundlesManager

    DagBundlesManager().sync_bundles_to_db()  # the DAG processor's first step: the bundle rows
    sync_bag_to_db(bag, "dags-folder", None)
    runner = SchedulerJobRunner(job=Job())

    def announce(session: Any, keys: list[str]) -> set[str]:
        asset = session.scalar(select(AssetModel).where(AssetModel.name == "tidemark.orders"))
        for key in keys:
            AssetManager.register_asset_change(asset=asset, partition_key=key, session=session)
        session.flush()
        return runner._create_dagruns_for_partitioned_asset_dags(session)

    with create_session() as session:
        session.execute(DagModel.__table__.update().where(DagModel.dag_id == MERGE).values(is_paused=False))
        announce(session, [f"2026-11-22T{h:02d}" for h in range(23)] + ["2026-11-23T00"])
    assert merge_runs() == []  # 23 of 24 hours: the day waits
    with create_session() as session:
        created = announce(session, ["2026-11-22T23"])
    assert MERGE in created
    assert merge_runs() == [("2026-11-22", "asset_triggered")]
