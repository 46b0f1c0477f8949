"""Groups: who belongs, what a table's own task does with the group job's record, and the
cross-table barrier (which hours are complete, announced once, again after an amend)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.helpers.records import journal_entry
from tidemark.catalog import table_configs
from tidemark.cli import main
from tidemark.config import TableConfig, parse_table
from tidemark.errors import ConfigError, MembershipError
from tidemark.group import barrier, outcomes
from tidemark.group.barrier import announce_group, complete_hours, digest
from tidemark.group.members import disagreements, group_members, groups_of, unloadable_members
from tidemark.group.outcomes import (
    FAILED,
    OK,
    SKIPPED,
    Step,
    TableOutcome,
    next_step,
    read_outcome,
    record_outcome,
)
from tidemark.group.roster import group_audit, join_group, leave_group, roster, roster_holds
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal, JournalState
from tidemark.stream.group import GroupMembership

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


def test_a_member_that_never_had_a_row_holds_the_barrier_only_up_to_its_ready_time() -> None:
    """A quiet member (batches committed, never a row) seals nothing: its ready time is its
    frontier, so the others' hours before it are announced; after it they wait."""
    t10, t11, t12 = "2026-11-22T10", "2026-11-22T11", "2026-11-22T12"
    a = state(journal_entry(t10), journal_entry(t11), journal_entry(t12))
    assert complete_hours({"a": a, "quiet": JournalState()}) == {}  # no ready time: it holds
    ready_at_12 = {"quiet": "2026-11-22T12:00:00+00:00"}
    assert complete_hours({"a": a, "quiet": JournalState()}, quiet=ready_at_12) == {
        t10: {"a": 1},
        t11: {"a": 1},
    }


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


def test_the_group_stream_reads_its_members_again_only_every_refresh() -> None:
    """The application polls the tables' modes every few seconds, but parses and checks the
    fleet's YAMLs only every ``members_refresh_s``."""

    loads: list[float] = []
    now = [0.0]

    def load() -> list[TableConfig]:
        loads.append(now[0])
        return [table("a", group="g")] * len(loads)

    membership = GroupMembership(load, refresh_s=60.0, clock=lambda: now[0])
    for second in range(0, 125, 5):  # a 5 s poll for two minutes
        now[0] = float(second)
        members = membership.members()
    assert loads == [0.0, 60.0, 120.0]
    assert len(members) == 3  # the last read is what it returns


def test_the_barriers_record_keeps_the_newest_hours_and_still_announces_old_amends_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """announced.json keeps ``KEEP_HOURS`` hours by name and folds the older ones into
    ``settled``: a folded hour is not announced again, an amend of it is (once), and an hour
    quarantined by one table is never folded away before it is released and announced."""

    monkeypatch.setattr(barrier, "KEEP_HOURS", 3)
    settings = replace(Settings.from_env(), state_uri=str(tmp_path / "state"), warehouse=str(tmp_path / "wh"))
    configs = [table("a", group="g"), table("b", group="g")]
    journals = {c.table: HourJournal(settings.state_location, c.table) for c in configs}
    seqs = {"a": 0, "b": 0}
    sealed_at = "2026-11-23T12:00:00+00:00"

    def write(name: str, hour: str, kind: str = "seal", version: int | None = None) -> None:
        entry = journal_entry(hour, kind, version, seq=seqs[name], table=name, sealed_at=sealed_at)
        journals[name].append(entry)
        seqs[name] += 1

    events = Events()

    def attempt() -> list[str]:
        outlet = Accessor()
        announced = announce_group(
            "g", configs, settings, outlet_events=_Any(outlet), inlet_events=events, run_id="r"
        )
        events.keep(outlet)
        return announced

    hours = [f"2026-11-22T{h:02d}" for h in range(12)]
    for hour in hours[:6]:
        write("a", hour)
        write("b", hour)
    assert attempt() == hours[:6]
    assert attempt() == []  # confirmed from Airflow's events, then folded
    record_file = tmp_path / "state" / "_groups" / "g" / "announced.json"
    record = json.loads(record_file.read_text())
    assert sorted(record["hours"]) == hours[3:6] and record["settled"]["before"] == hours[3]
    events.stored.clear()  # Airflow's events aged out of the look-back: only the record knows
    assert attempt() == []
    write("a", hours[1], "amend", 2)
    assert attempt() == [hours[1]]  # an amend of a folded hour: announced once
    assert attempt() == []
    events.stored.clear()
    assert attempt() == []

    write("b", hours[6], "quarantine")  # b holds hour 6 back
    write("a", hours[6])
    for hour in hours[7:11]:
        write("a", hour)
        write("b", hour)
    assert attempt() == hours[7:11]
    assert attempt() == []
    record = json.loads(record_file.read_text())
    assert record["settled"]["before"] <= hours[6]  # never folded past the held hour
    write("b", hours[6], "release")
    assert attempt() == [hours[6]]
    assert attempt() == []
    events.stored.clear()
    assert attempt() == []
    assert len(json.loads(record_file.read_text())["hours"]) <= 4


def test_joining_and_leaving_a_group_are_decisions_with_audit_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The roster: formed at the first announce; a YAML that starts naming the group holds the
    barrier until joined; a member no config names any more holds it until mended or left;
    each change is an audit record of the group."""

    conf = tmp_path / "conf"
    conf.mkdir()
    yaml_of = "table: {name}\ngroup: {group}\nsource: {{topic: {name}}}\nschema: {{id: string, ts: timestamp}}\nevent_time: {{field: ts}}\n"
    for name in ("a", "b"):
        (conf / f"{name}.yaml").write_text(yaml_of.format(name=name, group="g"))
    settings = replace(Settings.from_env(), conf_dir=conf, state_uri=str(tmp_path / "state"))
    when = datetime(2026, 11, 22, 12, tzinfo=UTC)

    def holds() -> dict[str, str]:
        every, _ = table_configs(settings)
        return roster_holds("g", group_members("g", settings), settings, every=every, at=when)

    assert holds() == {} and sorted(roster(settings, "g") or {}) == ["a", "b"]  # formed
    (conf / "c.yaml").write_text(yaml_of.format(name="c", group="g"))
    assert list(holds()) == ["c"] and "tidemark group join --group g --table c" in holds()["c"]
    with pytest.raises(MembershipError, match="needs a --reason"):
        join_group("g", "c", settings, reason="", by="ops", at=when)

    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(conf))
    monkeypatch.setenv("TIDEMARK_STATE_DIR", str(tmp_path / "state"))
    assert main(["group", "join", "--group", "g", "--table", "c"]) == 2  # no reason: refused, named
    assert "join needs --table and --reason" in capsys.readouterr().err
    assert main(["group", "join", "--group", "g", "--table", "c", "--reason", "joins", "--by", "ops"]) == 0
    assert holds() == {}
    with pytest.raises(MembershipError, match="is a member already"):
        join_group("g", "c", settings, reason="again", by="ops", at=when)

    # b's YAML stops naming the group: b holds (its hours would otherwise look complete) ...
    (conf / "b.yaml").write_text(yaml_of.format(name="b", group="other"))
    assert list(holds()) == ["b"] and "tidemark group leave --group g --table b" in holds()["b"]
    with pytest.raises(MembershipError, match="not a member"):
        leave_group("g", "x", settings, reason="typo", by="ops", at=when)
    with pytest.raises(MembershipError, match="still names the group"):
        leave_group("g", "a", settings, reason="wrong one", by="ops", at=when)
    leave_group("g", "b", settings, reason="b moved to group other", by="ops", at=when)  # ... until it leaves
    assert main(["group", "show", "--group", "g"]) == 0
    assert "leave offsets by ops: b moved to group other" in capsys.readouterr().out
    assert holds() == {} and sorted(roster(settings, "g") or {}) == ["a", "c"]
    assert [(r.action, r.offsets, r.by) for r in group_audit(settings, "g").records()] == [
        ("form", "a, b", "tidemark"),
        ("join", "c", "ops"),
        ("leave", "b", "ops"),
    ]


def test_a_tables_group_run_records_are_pruned_to_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outcomes, "KEEP_OUTCOMES", 3)
    state_dir = tmp_path / "state"
    for n in range(5):
        record_outcome(state_dir, TableOutcome("g", "a", "dump", f"run-{n}", OK))
    record_outcome(state_dir, TableOutcome("g", "a", "dump", "run-4", FAILED))  # a retry: still one
    record_outcome(state_dir, TableOutcome("g", "a", "seal", "run-0", OK))  # another job: its own
    assert [read_outcome(state_dir, "a", "dump", f"run-{n}") is not None for n in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert read_outcome(state_dir, "a", "seal", "run-0") is not None
    assert len(list((state_dir / "a" / "group_runs").glob("dump-*"))) == 3 + 1  # and its index
