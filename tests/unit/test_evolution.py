"""Schema evolution rules (pure) and the recorded history (create-only records in a temp dir)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tidemark.cli import main
from tidemark.config import TableConfig, load_table_file
from tidemark.errors import ConfigError, SchemaEvolutionError
from tidemark.evolution import SchemaHistory, SchemaVersion, evolution
from tidemark.schema import parse_column
from tidemark.state.seqlog import SequentialLog

pytestmark = pytest.mark.unit

BASE: dict[str, Any] = {
    "table": "clicks",
    "source": {"topic": "clicks"},
    "schema": {
        "id": "string not null",
        "ts": "timestamp not null",
        "app": "string",
        "n": "int",
        "x": "float",
        "price": "decimal(5,2)",
    },
    "event_time": {"field": "ts"},
    "partitioning": {"columns": ["app"]},
}


def config(tmp_path: Path, **changes: Any) -> TableConfig:
    data = yaml.safe_load(yaml.safe_dump(BASE, sort_keys=False))
    for key, value in changes.items():
        if key == "schema":
            data["schema"] = value
        else:
            data[key] = value
    path = tmp_path / "clicks.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_table_file(path)


def changed(tmp_path: Path, **columns: str | None) -> TableConfig:
    schema = dict(BASE["schema"])
    for name, spec in columns.items():
        if spec is None:
            schema.pop(name)
        else:
            schema[name] = spec
    return config(tmp_path, schema=schema)


def diff(tmp_path: Path, new: TableConfig) -> tuple[list[str], list[str]]:
    return evolution(SchemaVersion.of(config(tmp_path)), SchemaVersion.of(new))


@pytest.mark.parametrize(
    ("column", "spec"),
    [("n", "bigint"), ("n", "smallint"), ("x", "double"), ("price", "decimal(12,2)"), ("id", "string")],
)
def test_widenings_and_relaxations_are_allowed(tmp_path: Path, column: str, spec: str) -> None:
    if (column, spec) == ("n", "smallint"):  # a narrowing, the one refused row of this table
        allowed, refused = diff(tmp_path, changed(tmp_path, **{column: spec}))
        assert allowed == [] and "'n': int -> smallint is not a widening" in refused[0]
        assert "tinyint -> smallint -> int -> bigint" in refused[0]
        return
    allowed, refused = diff(tmp_path, changed(tmp_path, **{column: spec}))
    assert refused == [] and len(allowed) == 1 and repr(column) in allowed[0]


def test_a_new_nullable_column_is_allowed_and_a_new_required_one_refused(tmp_path: Path) -> None:
    allowed, refused = diff(tmp_path, changed(tmp_path, score="double"))
    assert refused == [] and allowed == ["column 'score' added (double); old hours read it as null"]
    _, refused = diff(tmp_path, changed(tmp_path, score="double not null"))
    assert len(refused) == 1 and "new column 'score'" in refused[0] and "must be nullable" in refused[0]


def test_drops_renames_narrowings_and_tightenings_are_refused_naming_column_and_rule(tmp_path: Path) -> None:
    new = changed(tmp_path, n=None, count="int", x="int", price="decimal(12,4)", app="string not null")
    allowed, refused = diff(tmp_path, new)
    text = "\n".join(refused)
    assert "column 'n' (int) is gone (renamed to 'count'?)" in text
    assert "never dropped or renamed" in text
    assert "'x': float -> int is not a widening" in text
    assert "'price': decimal(5,2) -> decimal(12,4) is not a widening" in text
    assert "'app' became 'not null'" in text
    assert allowed == ["column 'count' added (int); old hours read it as null"]


def test_layout_changes_are_refused(tmp_path: Path) -> None:
    schema = {**BASE["schema"], "other_ts": "timestamp"}
    new = config(
        tmp_path,
        schema=schema,
        event_time={"field": "other_ts", "time_zone": "Europe/Berlin"},
        partitioning={"columns": []},
    )
    _, refused = diff(tmp_path, new)
    assert [line.split(":")[0] for line in refused] == [
        "event_time.field",
        "event_time.time_zone",
        "partitioning.columns",
    ]


def test_history_records_versions_once_and_refuses_incompatible_configs(tmp_path: Path) -> None:
    state = tmp_path / "state"
    history = SchemaHistory(state, "clicks")
    v1 = history.ensure(config(tmp_path), "run-1")
    assert v1.version == 1 and history.ensure(config(tmp_path), "run-2") == v1  # no new record
    widened = changed(tmp_path, n="bigint", score="double")
    assert history.check(widened) == [
        "column 'n': widened int -> bigint",
        "column 'score' added (double); old hours read it as null",
    ]
    v2 = history.ensure(widened, "run-3")
    assert (v2.version, v2.run_id, len(v2.changes)) == (2, "run-3", 2)
    assert [v.version for v in SchemaHistory(state, "clicks").versions()] == [1, 2]

    with pytest.raises(SchemaEvolutionError) as info:  # back to the old schema: a drop and a narrowing
        history.ensure(config(tmp_path), "run-4")
    assert info.value.recorded_version == 2 and "clicks" in str(info.value)
    assert any("'score'" in p and "gone" in p for p in info.value.problems)
    assert any("'n': bigint -> int" in p for p in info.value.problems)
    assert len(history.versions()) == 2  # nothing recorded

    old = history.config_at(widened, 1)  # what a step re-reading a v1 hour validates against
    assert (
        list(old.columns) == list(BASE["schema"]) and old.columns["n"].type == parse_column("n", "int").type
    )
    assert old.columns["id"].nullable is False
    assert history.config_at(widened, 2) is widened and history.config_at(widened, None) is widened
    reordered = config(
        tmp_path, schema=dict(reversed(list({**BASE["schema"], "n": "bigint", "score": "double"}.items())))
    )
    assert history.ensure(reordered, "run-5") == v2  # the order of the YAML's columns is no change


def test_a_passed_check_is_cached_by_the_newest_record_and_a_change_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DAG files' check reads one record while the history and the YAML stay the same;
    a new version recorded by a job, or an edited YAML, reads the history again; a refusal
    is never served from the cache."""

    state, cache = tmp_path / "state", tmp_path / "cache" / "clicks.json"
    history = SchemaHistory(state, "clicks")
    history.ensure(config(tmp_path), "run-1")
    reads: list[int] = []
    real_read = SequentialLog.read

    def counted(log: SequentialLog, seq: int) -> Any:
        reads.append(seq)
        return real_read(log, seq)

    monkeypatch.setattr(SequentialLog, "read", counted)
    widened = changed(tmp_path, n="bigint")
    assert history.check(widened, cache) == ["column 'n': widened int -> bigint"]
    assert reads == [0, 1] and json.loads(cache.read_text())["newest"] == 0
    reads.clear()
    assert history.check(widened, cache) == ["column 'n': widened int -> bigint"]
    assert reads == [1]  # the record after the newest one read: still missing
    history.ensure(widened, "run-2")  # a job records version 2
    reads.clear()
    assert history.check(widened, cache) == []  # the YAML is now the recorded schema
    assert reads[-2:] == [1, 2] and len(reads) > 1
    narrowed = changed(tmp_path, n="int")  # an edited YAML: read again, refused, not cached
    with pytest.raises(SchemaEvolutionError):
        history.check(narrowed, cache)
    with pytest.raises(SchemaEvolutionError):
        history.check(narrowed, cache)
    cache.write_text("{torn")  # a crash mid-write elsewhere: read the history
    assert history.check(widened, cache) == []


def test_concurrent_first_records_agree_on_one_version(tmp_path: Path) -> None:
    history = SchemaHistory(tmp_path / "state", "clicks")
    new = changed(tmp_path, score="double")
    history.ensure(config(tmp_path), "run-0")
    results: list[SchemaVersion] = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(history.ensure(new, f"run-{i}"))) for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {r.version for r in results} == {2} and len(history.versions()) == 2


def test_an_expectation_naming_an_unknown_column_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        config(
            tmp_path,
            quality={
                "expectations": [
                    {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "nope"}}
                ]
            },
        )
    assert "quality.expectations[0]: 'nope' is not a column of the schema" in str(info.value)


def test_the_schema_command_and_tables_validate_show_the_history_and_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TIDEMARK_CONF_DIR", str(conf))
    monkeypatch.setenv("TIDEMARK_STATE_DIR", str(tmp_path / "state"))
    first = config(conf)
    assert main(["schema", "--table", "clicks"]) == 0
    assert "no schema recorded yet" in capsys.readouterr().out
    SchemaHistory(tmp_path / "state", "clicks").ensure(first, "run-1")

    changed(conf, score="double")
    assert main(["schema", "--table", "clicks"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("v1 (run run-1): id string not null, ts timestamp not null")
    assert "compatible change; the next job records v2:\n  - column 'score' added (double)" in out
    assert main(["tables", "validate"]) == 0
    assert "clicks" in capsys.readouterr().out

    changed(conf, n=None)
    assert main(["schema", "--table", "clicks", "--json"]) == 2
    info = json.loads(capsys.readouterr().out)
    assert [v["version"] for v in info["versions"]] == [1] and "'n'" in info["yaml"]["refused"][0]
    assert main(["tables", "validate"]) == 1
    assert "column 'n' (int) is gone" in capsys.readouterr().err
