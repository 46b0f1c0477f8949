"""Groups: who belongs, what a table's own task does with the group job's record, and the
cross-table barrier (which hours are complete, announced once, again after an amend)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.helpers.records import journal_entry
from tidemark.config import TableConfig, parse_table
from tidemark.errors import ConfigError
from tidemark.group.barrier import announce_group, complete_hours, digest
from tidemark.group.members import disagreements, groups_of
from tidemark.group.outcomes import FAILED, OK, SKIPPED, Step, TableOutcome, next_step
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal, JournalState

pytestmark = pytest.mark.unit

BASE = {
    "source": {"topic": "t"},
    "schema": {"id": "string", "ts": "timestamp"},
    "event_time": {"field": "ts"},
}


def table(name: str, **fields: Any) -> TableConfig:
    return parse_table({**BASE, "table": name, **fields}, f"{name}.yaml")


def outcome(status: str) -> TableOutcome:
    return TableOutcome("g", "a", "dump", "run-1", status)


def test_a_tables_task_reports_fails_or_runs_it_alone() -> None:
    assert next_step(outcome(OK), 1) is Step.REPORT
    assert next_step(outcome(SKIPPED), 1) is Step.SKIP
    assert next_step(outcome(FAILED), 1) is Step.FAIL
    assert next_step(None, 1) is Step.RUN_ALONE  # the group job died before this table
    for status in (OK, SKIPPED, FAILED):  # a retry, or a person clearing the task
        assert next_step(outcome(status), 2) is Step.RUN_ALONE
    # the whole run cleared: the group job ran again (its try 2) and wrote fresh records; the
    # tables' second tries report them instead of launching one application per table
    fresh = replace(outcome(OK), attempt=2)
    assert next_step(fresh, 2) is Step.REPORT
    assert next_step(fresh, 3) is Step.RUN_ALONE  # that table's task cleared once more, alone


def test_a_group_name_is_checked_and_its_tables_must_agree_on_schedule_and_zone() -> None:
    with pytest.raises(ConfigError, match="group"):
        table("a", group="Not A Name")
    a, b = table("a", group="g"), table("b", group="g", schedule="0 * * * *")
    c = table("c", group="g", event_time={"field": "ts", "time_zone": "Europe/Paris"})
    alone = table("d")
    assert {g: [t.table for t in ts] for g, ts in groups_of([c, alone, b, a]).items()} == {
        "g": ["a", "b", "c"]
    }
    problems = dict(disagreements([a, b, c, alone]))
    assert set(problems) == {"b", "c"}
    assert "schedule" in problems["b"] and "'a'" in problems["b"]
    assert "time_zone" in problems["c"]


def state(*entries: Any) -> JournalState:
    journal = JournalState()
    for seq, entry in enumerate(entries):
        journal.apply(replace(entry, seq=seq))
    return journal


def test_an_hour_is_complete_when_every_table_published_it() -> None:
    t10, t11 = "2026-11-22T10", "2026-11-22T11"
    a = state(journal_entry(t10), journal_entry(t11))
    b = state(journal_entry(t10))
    assert complete_hours({"a": a, "b": b}) == {t10: {"a": 1, "b": 1}}
    assert complete_hours({"a": a, "b": JournalState()}) == {}  # b has not sealed anything yet
    # b quarantined 11: not complete; released, it is
    b11 = state(journal_entry(t10), journal_entry(t11, "quarantine"))
    assert t11 not in complete_hours({"a": a, "b": b11})
    released = state(journal_entry(t10), journal_entry(t11, "quarantine"), journal_entry(t11, "release", 1))
    assert complete_hours({"a": a, "b": released})[t11] == {"a": 1, "b": 1}
    # a table whose data starts later had no rows in the earlier hour
    late_starter = state(journal_entry(t11))
    assert complete_hours({"a": a, "c": late_starter}) == {t10: {"a": 1}, t11: {"a": 1, "c": 1}}
    assert digest({"a": 1, "b": 1}) != digest({"a": 2, "b": 1})


def test_a_retired_member_stops_holding_the_barrier_once_its_last_hour_is_published() -> None:
    """Its topic is gone: it seals its last record's hour and no later one; the others go on."""
    t10, t11, t12 = "2026-11-22T10", "2026-11-22T11", "2026-11-22T12"
    a = state(journal_entry(t10), journal_entry(t11), journal_entry(t12))
    gone = state(journal_entry(t10))
    assert t12 not in complete_hours({"a": a, "gone": gone})  # while active, it holds
    after = complete_hours({"a": a, "gone": gone}, retired=frozenset({"gone"}))
    assert after == {t10: {"a": 1, "gone": 1}, t11: {"a": 1}, t12: {"a": 1}}
    quarantined = state(journal_entry(t10, "quarantine"))  # its last hour is not published yet
    assert t10 not in complete_hours({"a": a, "gone": quarantined}, retired=frozenset({"gone"}))


class Accessor:
    def __init__(self) -> None:
        self.extra: dict[str, Any] = {}
        self.partitions: list[str] = []

    def add_partitions(self, keys: list[str]) -> None:
        self.partitions += keys


class Events:
    """Airflow's events of the group asset: the outlets of an attempt become events only
    when the test says the task succeeded."""

    def __init__(self) -> None:
        self.stored: list[Any] = []

    def after(self, since: str) -> list[Any]:
        return self.stored

    def __getitem__(self, asset: Any) -> Events:
        return self

    def keep(self, outlet: Accessor) -> None:
        self.stored += [SimpleNamespace(partition_key=k, extra=outlet.extra) for k in outlet.partitions]


def test_the_barrier_announces_each_complete_hour_once_and_again_after_an_amend(tmp_path: Path) -> None:
    settings = replace(Settings.from_env(), state_uri=str(tmp_path / "state"), warehouse=str(tmp_path / "wh"))
    configs = [table("a", group="g"), table("b", group="g")]
    journals = {c.table: HourJournal(settings.state_location, c.table) for c in configs}
    sealed_at = "2026-11-22T12:00:00+00:00"
    journals["a"].append(journal_entry("2026-11-22T10", table="a", sealed_at=sealed_at))
    events = Events()

    def attempt(succeeds: bool = True) -> list[str]:
        outlet = Accessor()
        announced = announce_group(
            "g", configs, settings, outlet_events=_Any(outlet), inlet_events=events, run_id="r"
        )
        if succeeds:
            events.keep(outlet)
        return announced

    assert attempt() == []  # b has sealed nothing
    journals["b"].append(journal_entry("2026-11-22T10", table="b", sealed_at=sealed_at))
    assert attempt(succeeds=False) == ["2026-11-22T10"]  # emitted, but the task failed: not kept
    assert attempt() == ["2026-11-22T10"]  # emitted again, kept
    assert attempt() == []  # Airflow holds it: confirmed, not emitted again
    assert [e.partition_key for e in events.stored] == ["2026-11-22T10"]
    journals["a"].append(journal_entry("2026-11-22T10", "amend", 2, seq=1, table="a", sealed_at=sealed_at))
    assert attempt() == ["2026-11-22T10"]  # an amend re-announces the group's hour
    assert attempt() == []
    assert [e.extra["digests"][e.partition_key] for e in events.stored] == [
        digest({"a": 1, "b": 1}),
        digest({"a": 2, "b": 1}),
    ]


class _Any(dict[Any, Accessor]):
    """outlet_events[asset] for any asset."""

    def __init__(self, accessor: Accessor) -> None:
        super().__init__()
        self.accessor = accessor

    def __missing__(self, key: Any) -> Accessor:
        return self.accessor


def test_a_table_leaving_never_re_announces_and_a_member_that_cannot_load_holds_the_barrier(
    tmp_path: Path,
) -> None:
    """Membership changes: a member whose YAML breaks holds every hour (its hours may not be
    published: none is announced early); a table that leaves re-announces nothing; an amend
    of a table still in the group does."""
    settings = replace(Settings.from_env(), state_uri=str(tmp_path / "state"), warehouse=str(tmp_path / "wh"))
    a, b, c = table("a", group="g"), table("b", group="g"), table("c", group="g")
    journals = {t.table: HourJournal(settings.state_location, t.table) for t in (a, b, c)}
    sealed_at = "2026-11-22T13:00:00+00:00"
    for name in ("a", "b", "c"):
        journals[name].append(journal_entry("2026-11-22T10", table=name, sealed_at=sealed_at))
    for name in ("a", "b"):  # c has not sealed hour 11 yet
        journals[name].append(journal_entry("2026-11-22T11", table=name, seq=1, sealed_at=sealed_at))
    events = Events()

    def attempt(configs: list[TableConfig], held: dict[str, str] | None = None) -> list[str]:
        outlet = Accessor()
        announced = announce_group(
            "g", configs, settings, outlet_events=_Any(outlet), inlet_events=events, run_id="r", held=held
        )
        events.keep(outlet)
        return announced

    assert attempt([a, b, c]) == ["2026-11-22T10"]
    # c's YAML breaks: it is held, not absent (absent, hour 11 would look complete)
    assert attempt([a, b], held={"conf/tables/c.yaml": "invalid configuration"}) == []
    assert attempt([a, b, c]) == []  # mended: nothing new, nothing again
    # c leaves the group for good: hour 10 is not announced again; hour 11 is now complete
    assert attempt([a, b]) == ["2026-11-22T11"]
    assert attempt([a, b]) == []
    journals["a"].append(journal_entry("2026-11-22T10", "amend", 2, seq=2, table="a", sealed_at=sealed_at))
    assert attempt([a, b]) == ["2026-11-22T10"]  # an amend of a table still in the group
    assert [e.partition_key for e in events.stored] == ["2026-11-22T10", "2026-11-22T11", "2026-11-22T10"]


def test_a_member_whose_yaml_breaks_is_found_as_holding_its_group(tmp_path: Path) -> None:
    from tidemark.group.members import unloadable_members

    conf = tmp_path / "conf"
    conf.mkdir()
    good = "\n".join(
        [
            "table: {name}",
            "group: g",
            "source: {{topic: {name}}}",
            "schema: {{id: string, ts: timestamp}}",
            "event_time: {{field: ts}}",
        ]
    )
    (conf / "a.yaml").write_text(good.format(name="a"))
    (conf / "b.yaml").write_text(good.format(name="b").replace("ts: timestamp}", "ts: timestampp}"))
    (conf / "c.yaml").write_text(good.format(name="c").replace("group: g", "group: other").replace("}}", "}"))
    settings = replace(Settings.from_env(), conf_dir=conf, state_uri=str(tmp_path / "state"))
    held = unloadable_members("g", settings)
    assert [Path(where).name for where in held] == ["b.yaml"]
