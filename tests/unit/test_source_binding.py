"""A table bound to its topic, as state and config: the reader's own settings refused in the
YAML, a start past the latest offset refused at planning, the binding kept by the commit log
(and moved only by a rebase), a table name two families claim held by the topic the table
read, a retired group member that holds the barrier until it is done, and a metastore service
that accepts and never answers failing the seal in bounded time."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.classify import events_config
from tests.helpers.families import two_families_claiming_one_table
from tests.helpers.jobs import run_job_process
from tests.helpers.records import journal_entry
from tidemark.catalog import table_configs
from tidemark.config import parse_table
from tidemark.config.source import READER_OWNED
from tidemark.errors import (
    BrokerUnavailableError,
    ConfigError,
    HourRangeError,
    LeaseLostError,
    MetastoreServiceError,
    OffsetsLostToRetentionError,
    RebuildError,
    StartingOffsetsError,
    TopicChangedError,
)
from tidemark.group.barrier import complete_hours, finished_retired
from tidemark.hourcommit.base import Writer
from tidemark.hourcommit.renaming import RenamingVersions
from tidemark.ingest.planner import next_ranges
from tidemark.ingest.replay import ReplayRequest, plan_replay
from tidemark.ingest.resolve import decision_problems
from tidemark.jobs import NO_RETRY_EXIT_CODE
from tidemark.seal.rebuild_plan import hour_range
from tidemark.seal.thrift_metastore import ThriftMetastore
from tidemark.settings import Settings
from tidemark.state.batches import Commit, MqPartitionStats, MqRange, Plan
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout, compaction_marker
from tidemark.state.locks import TableLock
from tidemark.state.storage import replace_atomically
from tidemark.table import Table
from tidemark.time.hours import parse_key

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
NOON = "2026-11-22T12:00:00+00:00"


def _events_yaml(**source: Any) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "conf" / "tables" / "events.yaml").read_text())
    data["source"].update(source)
    return data


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("auto.offset.reset", "earliest", "never jump to the log start or end"),
        ("auto.offset.reset", "latest", "never jump to the log start or end"),
        ("isolation.level", "read_uncommitted", "aborted records"),
        ("enable.partition.eof", "false", "end-of-partition"),
        ("enable.auto.commit", "true", "source of truth"),
        ("group.id", "copied-from-a-consumer", "source.consumer_group"),
    ],
)
def test_the_readers_own_settings_are_refused_in_kafka_properties_naming_the_key_and_why(
    key: str, value: str, why: str
) -> None:
    data = _events_yaml(kafka_properties={"security.protocol": "SASL_SSL", key: value})
    with pytest.raises(ConfigError) as refused:
        parse_table(data, "events.yaml")
    text = str(refused.value)
    assert "source.kafka_properties" in text and key in text and why in text
    assert key in READER_OWNED
    # what a client may set stays allowed: security, per-table brokers, fetch tuning
    allowed = {"security.protocol": "SASL_SSL", "bootstrap.servers": "b:9092", "fetch.max.bytes": "1048576"}
    assert (
        parse_table(_events_yaml(kafka_properties=allowed), "events.yaml").source.kafka_properties == allowed
    )


def test_a_starting_offset_past_the_latest_is_refused_at_planning_never_committed() -> None:
    config = events_config()
    config = config.model_copy(
        update={"source": config.source.model_copy(update={"starting_offsets": {0: 500}})}
    )
    with pytest.raises(StartingOffsetsError, match=r"offset 500, beyond the broker's latest offset 120"):
        next_ranges(config, {}, {0: (0, 120)})
    at_the_end = config.source.model_copy(update={"starting_offsets": {0: 120}})
    assert next_ranges(config.model_copy(update={"source": at_the_end}), {}, {0: (0, 120)}) == [
        MqRange(0, 120, 120)
    ]


def _commit(
    log: CommitLog,
    batch: int,
    topic: str,
    *,
    by: str = "",
    extra: dict[str, Any] | None = None,
    plan: bool = True,
) -> None:
    ranges = (MqRange(0, batch * 10, batch * 10 + 10),)
    if plan:
        log.write_plan(Plan("t", batch, f"r{batch}", topic, NOON, ranges))
    log.write_commit(
        Commit(
            "t",
            batch,
            f"r{batch}",
            by or f"r{batch}",
            topic,
            NOON,
            ranges,
            (),
            {"dt=2026-11-22/hr=11": 10},
            (MqPartitionStats(0, 10, 10, 0),),
            0,
            10,
            extra=extra or {},
        )
    )


def test_the_commit_log_binds_the_table_to_its_topic_and_only_a_rebase_moves_it(tmp_path: Path) -> None:
    log = CommitLog(tmp_path, "t")
    assert log.bound_topic() is None
    log.write_plan(Plan("t", 0, "r0", "clicks", NOON, (MqRange(0, 0, 10),), topic_id="id-1"))
    assert log.bound_topic() == "clicks"  # a first plan binds it already
    _commit(log, 0, "clicks", extra={"topic_id": "id-1"}, plan=False)
    _commit(log, 1, "clicks")
    state = log.state()
    assert (state.topic, state.topic_id, state.restarted_at) == ("clicks", "id-1", {})
    _commit(log, 2, "clicks", by="resolve:rebase#0", extra={"topic_id": "id-2"})
    _commit(log, 3, "views", by="resolve:rebase#1")  # bound to another topic: the old id means nothing
    state = log.state()
    assert (state.topic, state.topic_id, state.restarted_at) == ("views", None, {0: 3})
    assert log.write_checkpoint().topic == "views"
    again = CommitLog(tmp_path, "t").state()  # read back from the checkpoint
    assert (again.topic, again.restarted_at) == ("views", {0: 3})


def test_two_families_claiming_one_table_name_leave_it_to_the_topic_it_is_bound_to(tmp_path: Path) -> None:
    """Sort order would give it to ``clicks`` (its file sorts first); the table read ``more``'s
    topic for a day: it stays that topic's, and ``clicks``' claim is refused."""
    settings = two_families_claiming_one_table(tmp_path)
    _commit(CommitLog(settings.state_location, "t_clicks_eu"), 0, "clicks_eu")

    configs, problems = table_configs(settings)
    assert [(c.table, c.source.topic) for c in configs] == [("t_clicks_eu", "clicks_eu")]
    (where,) = problems
    assert "family clicks" in where and "already the table of topic 'clicks_eu'" in problems[where]


def test_a_retired_member_holds_the_barrier_until_its_last_rows_are_published(tmp_path: Path) -> None:
    """Retired while its hour 11 still waits for its seal: the group's hour 11 must not be
    announced without it (and then again once it seals)."""
    settings = replace(Settings.from_env({"TIDEMARK_HOME": str(tmp_path / "home")}), conf_dir=tmp_path)
    gone = events_config().model_copy(update={"table": "t"})
    gone = gone.model_copy(update={"source": gone.source.model_copy(update={"retired": True})})
    _commit(CommitLog(settings.state_location, "t"), 0, "clicks")  # rows in hour 11
    journal = HourJournal(settings.state_location, "t")
    journal.append(journal_entry("2026-11-22T10"))
    other = {"2026-11-22T10": None, "2026-11-22T11": None, "2026-11-22T12": None}
    a = HourJournal(settings.state_location, "a")
    for seq, hour in enumerate(other):
        a.append(journal_entry(hour, seq=seq, table="a"))
    journals = {"a": a.state(), "t": journal.state()}

    assert finished_retired([gone], journals, settings) == frozenset()
    assert "2026-11-22T11" not in complete_hours(journals, finished_retired([gone], journals, settings))
    journal.append(journal_entry("2026-11-22T11", seq=1))  # its last rows sealed: now it is done
    journals["t"] = journal.state()
    assert finished_retired([gone], journals, settings) == frozenset({"t"})
    assert set(complete_hours(journals, frozenset({"t"}))) == set(other)


def test_a_metastore_service_that_accepts_and_never_answers_fails_the_call_in_bounded_time() -> None:
    """Without a socket timeout the seal (and the table's lock) waited for Airflow's task timeout."""
    silent = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(silent.accept()[0])  # accepted, never answered
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    port = silent.getsockname()[1]
    hive_client: Any = type("HiveClient", (), {"spark": None})()  # never called: no table is created
    metastore = ThriftMetastore(f"thrift://127.0.0.1:{port}", events_config(), hive_client, timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(MetastoreServiceError, match=r"no answer within 1 s"):
        metastore.partition_names("events")
    assert time.monotonic() - started < 10
    silent.close()
    for connection in held:
        connection.close()


def test_the_metastore_timeout_is_a_setting() -> None:
    assert Settings.from_env({"TIDEMARK_METASTORE_TIMEOUT_S": "5"}).metastore_timeout_s == 5.0
    with pytest.raises(ConfigError, match="TIDEMARK_METASTORE_TIMEOUT_S"):
        Settings.from_env({"TIDEMARK_METASTORE_TIMEOUT_S": "soon"})


def test_a_seal_paused_past_its_lease_deletes_no_published_hour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compaction's residue clean-up ran without the lease's check: a seal that decided
    "not compacted yet", paused, and resumed after its successor published the hour deleted
    the published directory (local disk and HDFS)."""
    settings = replace(
        Settings.from_env({"TIDEMARK_HOME": str(tmp_path / "home")}), state_uri=str(tmp_path / "s")
    )
    layout = Layout(settings, "t")
    commit = RenamingVersions(layout)
    hour = parse_key("2026-11-22T10", "UTC")
    lock = TableLock(settings.state_location, "t")
    monkeypatch.setenv("TIDEMARK_LOCK_LEASE_S", "0.001")
    paused = Writer("seal-1", lock.acquire("seal-1"))  # no renewal: frozen past its lease
    time.sleep(0.05)
    monkeypatch.setenv("TIDEMARK_LOCK_LEASE_S", "600")
    successor = Writer("seal-2", lock.acquire("seal-2"))
    published = layout.table_dir / hour.path
    published.mkdir(parents=True)
    (published / "part-0.parquet").write_bytes(b"rows")
    replace_atomically(compaction_marker(published), {"files": ["part-0.parquet"], "rows": 1})

    with pytest.raises(LeaseLostError):  # it found no complete version when it looked
        commit.draft(hour, "compact", version=1, through=3, writer=paused, rows=2)
    draft = commit.draft(hour, "compact", version=1, through=3, writer=successor, rows=1)
    assert draft.done is not None and draft.directory == published  # the published one, reused
    assert (published / "part-0.parquet").read_bytes() == b"rows"


def test_a_replay_neither_runs_nor_moves_the_binding_when_the_config_names_another_topic(
    tmp_path: Path,
) -> None:
    """A replay reads no broker, but its commit record names the config's topic: committed
    while the config names another topic, it would have moved the table's binding silently."""
    config = events_config()
    settings = replace(
        Settings.from_env({"TIDEMARK_HOME": str(tmp_path / "home")}), state_uri=str(tmp_path / "s")
    )
    state = Table.state_of(settings.state_location, config.table)
    log = state.commit_log
    _commit(log, 0, "clicks")
    request = ReplayRequest(None, "ops", "schema fixed", datetime(2026, 11, 22, 13, tzinfo=UTC))
    with pytest.raises(TopicChangedError, match=r"bound to topic clicks .*reads topic events;.*a replay"):
        plan_replay(config, Layout(settings, config.table), state, "replay-1", request)
    assert log.pending_plan(log.state()) is None  # nothing planned
    _commit(log, 1, "events", extra={"replay": {"batches": [0]}})  # a replay's commit keeps the binding
    assert log.bound_topic() == "clicks"


def test_a_trigger_forms_decision_is_checked_as_a_whole_before_any_job_starts() -> None:
    def args(**given: str) -> list[str]:
        return ["--table", "t", "--run-id", "r", *(x for k, v in given.items() for x in (f"--{k}", v))]

    assert decision_problems(args()) == []
    assert decision_problems(args(**{"resolve": "skip", "resolve-reason": "poison range"})) == []
    (problem,) = decision_problems(args(**{"replay-dirty": "all", "resolve-reason": " "}))
    assert problem.startswith("resolve_reason: the replay of 'all' needs a reason")
    assert "resolve_reason: the decision 'rebase'" in decision_problems(args(resolve="rebase"))[0]
    assert (
        "neither 'all' nor batch ids"
        in decision_problems(args(**{"replay-dirty": "3;5", "resolve-reason": "x"}))[0]
    )


def test_a_job_stops_on_an_error_a_retry_cannot_change_with_its_own_exit_status(tmp_path: Path) -> None:
    """The task operator fails such a task without its retries (a missing table config here:
    the job's process stops before any Spark session)."""
    settings = replace(Settings.from_env({"TIDEMARK_HOME": str(tmp_path / "home")}), conf_dir=tmp_path)
    code, out, _ = run_job_process(settings, "dump", "nowhere", "r")
    assert code == NO_RETRY_EXIT_CODE and '"retryable": false' in out and "ConfigError" in out
    assert (
        not ConfigError("x", ["y"]).retryable
        and OffsetsLostToRetentionError("t", "x", 0, 1, 2).retryable is False
    )
    assert BrokerUnavailableError("down").retryable  # a broker back is a retry that succeeds
    with pytest.raises(HourRangeError) as reversed_range:  # the rebuild form's hours, wrong on every try
        hour_range("2026-11-22T11", "2026-11-22T10", "UTC")
    assert isinstance(reversed_range.value, RebuildError) and not reversed_range.value.retryable
    assert RebuildError("lost a race: retry the rebuild").retryable
