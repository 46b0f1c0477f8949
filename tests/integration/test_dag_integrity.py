"""DAG integrity (astro-cli template): every file in dags/ imports without errors, touches no
database and looks up no connection or variable at parse time, and every DAG has retries,
tags and docs."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from sqlalchemy import event  # noqa: TID253
from sqlalchemy.engine import Engine  # noqa: TID253

from tidemark.airflow.dag_ids import table_of_dag
from tidemark.airflow.dags import SHARDS, shard_of
from tidemark.catalog import load_tables

pytestmark = pytest.mark.integration

DAGS = Path(__file__).resolve().parents[2] / "dags"
ERRORS_FILE = "tidemark_config_errors.py"


@pytest.fixture(scope="module")
def dagbag() -> Any:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import BaseHook, Variable

    queries: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        queries.append(statement)

    forbidden = mock.Mock(side_effect=AssertionError("connection/variable lookup at parse time"))
    event.listen(Engine, "before_cursor_execute", record)
    try:
        with (
            mock.patch.object(BaseHook, "get_connection", forbidden),
            mock.patch.object(Variable, "get", forbidden),
        ):
            bag = DagBag(dag_folder=str(DAGS))
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    bag.parse_queries = queries  # type: ignore[attr-defined]
    bag.lookups = forbidden.call_count  # type: ignore[attr-defined]
    return bag


def test_every_dag_file_imports_and_each_table_lives_in_its_shard(dagbag: Any) -> None:
    """No import error; the DAG files are the error file and one file per shard; every
    table's DAGs come from the one shard file its name hashes to."""

    assert dagbag.import_errors == {}
    shards = {f"tidemark_tables_{i}.py" for i in range(SHARDS)}
    assert {p.name for p in DAGS.glob("*.py")} == {ERRORS_FILE, *shards}
    tables = {t.table for t in load_tables()}
    by_table: dict[str, set[str]] = {}
    for dag in dagbag.dags.values():
        by_table.setdefault(table_of_dag(dag.dag_id) or "", set()).add(Path(dag.fileloc).name)
    assert set(by_table) == tables
    assert by_table == {t: {f"tidemark_tables_{shard_of(t)}.py"} for t in tables}


def test_one_bad_table_among_fifty_disappears_alone_with_one_import_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """49 good table YAMLs and one with a typo in a type: the 49 tables keep every DAG, and
    Airflow shows one import error naming the bad file and its problem."""
    from airflow.dag_processing.dagbag import DagBag

    conf = tmp_path / "conf"
    conf.mkdir()
    template = yaml.safe_load((DAGS.parent / "conf" / "tables" / "events.yaml").read_text())
    for i in range(50):
        data = {**template, "table": f"t{i:02d}", "source": {**template["source"], "topic": f"t{i:02d}"}}
        if i == 17:
            data["schema"] = {**template["schema"], "user_id": "bigintt"}
        (conf / f"t{i:02d}.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(conf))
    monkeypatch.setenv("TIDEMARK_STATE_DIR", str(tmp_path / "state"))
    bag = DagBag(dag_folder=str(DAGS))
    assert {f"tidemark_ingest_t{i:02d}" for i in range(50) if i != 17} <= set(bag.dag_ids)
    assert not [d for d in bag.dag_ids if d.endswith("t17")]
    (path, error), *others = bag.import_errors.items()
    assert not others and Path(path).name == ERRORS_FILE
    assert "t17.yaml" in error and "bigintt" in error and "t16.yaml" not in error


def test_no_db_or_connection_access_at_parse_time(dagbag: Any) -> None:
    assert dagbag.parse_queries == []
    assert dagbag.lookups == 0


def test_ingest_seal_and_rebuild_dags_per_table(dagbag: Any) -> None:
    kinds = ("ingest", "seal", "rebuild")
    expected = {f"tidemark_{kind}_{t.table}" for t in load_tables() for kind in kinds}
    assert expected <= set(dagbag.dag_ids)


def test_every_dag_records_failures_and_has_described_typed_params(dagbag: Any) -> None:
    for dag in dagbag.dags.values():
        assert all(t.on_failure_callback for t in dag.tasks), dag.dag_id
        params = dag.params.dump()
        assert "dry_run" in params, dag.dag_id
        for name in params:
            param = dag.params.get_param(name)
            assert param.description and param.schema.get("type"), (dag.dag_id, name)


def test_trigger_form_rejects_a_malformed_hour(dagbag: Any) -> None:
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    rebuild = dagbag.dags["tidemark_rebuild_events"]
    good = ParamsDict(rebuild.params)
    good.update({"first_hour": "2026-11-22T10", "last_hour": "2026-11-22T12"})
    assert good.validate()["first_hour"] == "2026-11-22T10"
    with pytest.raises(ParamValidationError, match="first_hour: '2026-11-22 10:00' does not match"):
        ParamsDict(rebuild.params).update({"first_hour": "2026-11-22 10:00"})
    seal = dagbag.dags["tidemark_seal_events"]
    with pytest.raises(ParamValidationError, match="'yesterday' does not match"):
        ParamsDict(seal.params).update({"release": ["2026-11-22T10", "yesterday"]})


def test_rebuild_dag_is_hourly_without_catchup_and_registers_in_the_pool(dagbag: Any) -> None:
    dag = dagbag.dags["tidemark_rebuild_events"]
    import pendulum
    from airflow.timetables.interval import CronDataIntervalTimetable

    assert dag.catchup is False and isinstance(dag.timetable, CronDataIntervalTimetable)
    interval = dag.timetable.infer_manual_data_interval(run_after=pendulum.datetime(2026, 11, 22, 10, 30))
    assert (interval.start, interval.end) == (
        pendulum.datetime(2026, 11, 22, 9),
        pendulum.datetime(2026, 11, 22, 10),
    )
    plan, rebuild = dag.get_task("plan"), dag.get_task("rebuild")
    assert plan.downstream_task_ids == {"rebuild"} and rebuild.downstream_task_ids == {"announce"}
    assert rebuild.pool == "hive_metastore" and rebuild.application.endswith("spark_jobs/rebuild.py")
    assert "{{ ti.xcom_pull(task_ids='plan') }}" in rebuild.application_args


@pytest.mark.parametrize("attribute", ["retries", "tags", "doc_md"])
def test_dag_hygiene(dagbag: Any, attribute: str) -> None:
    for dag in dagbag.dags.values():
        if attribute == "retries":
            # check_deadlines judges a fixed instant (the run's interval end): a retry cannot differ
            assert all(t.retries >= 2 for t in dag.tasks if t.task_id != "check_deadlines"), dag.dag_id
        elif attribute == "tags":
            assert dag.tags and "tidemark" in dag.tags, dag.dag_id
        else:
            assert dag.doc_md and len(dag.doc_md.strip()) > 40, dag.dag_id


def test_ingest_dag_passes_templated_run_id(dagbag: Any) -> None:
    dag = dagbag.dags["tidemark_ingest_events"]
    dump = dag.get_task("dump")
    assert dag.max_active_runs == 1
    assert "{{ run_id }}" in dump.application_args
    assert dump.application.endswith("spark_jobs/dump.py")


def test_ingest_dag_is_dump_seal_announce_with_the_metastore_pool(dagbag: Any) -> None:
    dag = dagbag.dags["tidemark_ingest_events"]
    dump, seal, announce = (dag.get_task(t) for t in ("dump", "seal", "announce"))
    assert dump.downstream_task_ids == {"seal"}
    assert seal.downstream_task_ids == {"announce", "metrics", "check_deadlines"}
    assert dag.get_task("metrics").trigger_rule == "all_done"
    assert dag.get_task("check_deadlines").trigger_rule == "all_done"
    assert seal.pool == "hive_metastore"
    assert seal.application.endswith("spark_jobs/seal.py") and "{{ run_id }}" in seal.application_args
    assert [a.name for a in announce.outlets] == ["tidemark.events"]
    assert [a.name for a in announce.inlets] == ["tidemark.events"]


def test_the_merge_dag_rolls_sealed_hours_up_to_its_snapshot_period(dagbag: Any) -> None:
    """As the scheduler sees it (the serialized DAG): every hour key the announce task emits
    maps to its day, and a day's run waits for exactly its 24 hours."""
    from airflow.serialization.serialized_objects import DagSerialization

    dag = dagbag.dags["tidemark_merge_orders"]
    timetable = DagSerialization.from_dict(DagSerialization.to_dict(dag)).timetable
    assert timetable.partitioned
    mapper: Any = timetable.get_partition_mapper(name="tidemark.orders")  # a RollupMapper
    assert mapper.to_downstream("2026-11-22T00") == mapper.to_downstream("2026-11-22T23") == "2026-11-22"
    assert mapper.to_downstream("2026-11-23T00") == "2026-11-23"
    assert set(mapper.to_upstream("2026-11-22")) == {f"2026-11-22T{h:02d}" for h in range(24)}
    assert "{{ params.snapshot or dag_run.partition_key }}" in dag.get_task("merge").application_args


def test_cdc_tables_get_bootstrap_and_merge_dags_and_a_remerge_trigger(dagbag: Any) -> None:
    assert {"tidemark_bootstrap_orders", "tidemark_merge_orders"} <= set(dagbag.dags)
    assert "tidemark_bootstrap_events" not in dagbag.dags
    bootstrap = dagbag.dags["tidemark_bootstrap_orders"]
    assert type(bootstrap.timetable).__name__ == "NullTimetable"  # manual only
    assert not any("password" in name for name in bootstrap.params.dump())
    ingest = dagbag.dags["tidemark_ingest_orders"]
    assert ingest.get_task("remerge").upstream_task_ids == {"find_stale_snapshot"}
    assert "remerge" not in dagbag.dags["tidemark_ingest_events"].task_ids


def test_every_dag_that_publishes_hours_of_a_cdc_table_remerges_a_snapshot_they_made_stale(
    dagbag: Any,
) -> None:
    """One shared task group (``airflow/task_groups.publish_tasks``): ingest, seal (a release),
    rebuild and stream all change published hours, so each announces them and re-merges the
    snapshot an amended hour made stale; the same DAGs of a plain table have no remerge."""
    for kind in ("ingest", "seal", "rebuild", "stream"):
        cdc = dagbag.dags[f"tidemark_{kind}_orders"]
        assert cdc.get_task("find_stale_snapshot").upstream_task_ids == {"announce"}, kind
        assert cdc.get_task("remerge").upstream_task_ids == {"find_stale_snapshot"}, kind
        assert "remerge" not in dagbag.dags[f"tidemark_{kind}_events"].task_ids, kind


def test_every_dag_builds_on_an_s3_warehouse_and_s3_state(
    s3: str, monkeypatch: pytest.MonkeyPatch, tidemark_home: Path
) -> None:
    """The production topology (docker-compose.yaml's .env): warehouse and state on S3. The
    DAG files must import there as on local disk, and the table's Asset names the S3 URI."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("TIDEMARK_WAREHOUSE", f"{s3}/warehouse")
    monkeypatch.setenv("TIDEMARK_STATE_DIR", f"{s3}/state")
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}

    tables = load_tables()
    assert {f"tidemark_ingest_{t.table}" for t in tables} <= set(bag.dag_ids)
    announce = bag.dags["tidemark_ingest_events"].get_task("announce")
    assert [a.uri for a in announce.outlets] == [f"{s3}/warehouse/events"]


def test_a_group_gets_one_dag_in_one_file_and_a_disagreeing_table_is_refused_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two groups, a table of one group on another schedule, one table without a group: each
    group has one DAG (mapped per-table tasks, an announce per table, the barrier) built in
    the file its name hashes to, its tables' other DAGs in theirs; grouped tables have no
    ingest DAG; the disagreeing table disappears alone, named in the import error."""
    from airflow.dag_processing.dagbag import DagBag

    conf = tmp_path / "conf"
    conf.mkdir()
    template = yaml.safe_load((DAGS.parent / "conf" / "tables" / "events.yaml").read_text())
    layout = {f"a{i}": "alpha" for i in range(4)} | {f"b{i}": "beta" for i in range(3)} | {"solo": None}
    for name, group in layout.items():
        data = {**template, "table": name, "source": {**template["source"], "topic": name}}
        if group:
            data["group"] = group
        if name == "b2":
            data["schedule"] = "0 * * * *"
        (conf / f"{name}.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(conf))
    monkeypatch.setenv("TIDEMARK_STATE_DIR", str(tmp_path / "state"))
    bag = DagBag(dag_folder=str(DAGS))
    (path, error), *others = bag.import_errors.items()
    assert not others and Path(path).name == ERRORS_FILE
    assert "b2.yaml" in error and "group 'beta'" in error and "'b0'" in error
    assert not [d for d in bag.dag_ids if d.endswith("_b2")]
    assert "tidemark_ingest_solo" in bag.dag_ids
    assert not [d for d in bag.dag_ids if d.startswith("tidemark_ingest_") and d != "tidemark_ingest_solo"]
    for group, members in (("alpha", ["a0", "a1", "a2", "a3"]), ("beta", ["b0", "b1"])):
        dag = bag.dags[f"tidemark_group_{group}"]
        assert Path(dag.fileloc).name == f"tidemark_tables_{shard_of(group)}.py"
        for table in members:
            assert (
                Path(bag.dags[f"tidemark_seal_{table}"].fileloc).name
                == f"tidemark_tables_{shard_of(table)}.py"
            )
        mapped: Any = dag.get_task("dump_table")
        assert mapped.expand_input.value["table"] == members
        assert {f"announce_{t}" for t in members} | {"announce_group", "every_table_ok"} <= set(dag.task_ids)
        assert dag.default_args["retries"] == template["retries"] and "group" in dag.tags
        # a table's retries hold nothing back: the seal waits for the dump application only,
        # each announce (and the barrier) for the seal application only
        assert dag.get_task("seal").upstream_task_ids == {"dump"}
        assert {frozenset(dag.get_task(f"announce_{t}").upstream_task_ids) for t in members} == {
            frozenset({"seal"})
        }
        assert dag.get_task("announce_group").upstream_task_ids == {"seal"}
        assert all(t.on_failure_callback for t in dag.tasks)


def test_the_maintenance_dag_drops_old_hours_then_compacts_then_checks(dagbag: Any) -> None:
    dag = dagbag.dags["tidemark_maintain_events"]  # conf/tables/events.yaml keeps 90 days
    retention, compact = dag.get_task("retention"), dag.get_task("compact")
    assert retention.downstream_task_ids == {"compact"} and compact.downstream_task_ids == {"verify"}
    assert {retention.pool, compact.pool} == {"hive_metastore"}
    assert retention.application.endswith("spark_jobs/retention.py")
    assert compact.application.endswith("spark_jobs/compact.py")
    args = retention.application_args
    assert args[args.index("--as-of") + 1] == "{{ data_interval_end.isoformat() }}"
    assert args[args.index("--dry-run") + 1] == "{{ params.dry_run }}"
    assert "retention.hours" in (dag.doc_md or "") and "compaction.max_files_per_hour" in (dag.doc_md or "")
    others = [d for d in dagbag.dags.values() if d.dag_id.startswith("tidemark_maintain_") and d is not dag]
    assert others and all("compact" in d.task_ids for d in others)  # every table compacts
    assert all("retention" not in d.task_ids for d in others if "events" not in d.dag_id)
