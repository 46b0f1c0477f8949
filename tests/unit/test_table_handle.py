"""The table handle, the one door to a table's state: a job opens its table once and checks
its schema once (``Table.held``), a reader opens it without choosing a layout, and outside a
job every ``Table.open`` is its own handle."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.classify import events_config
from tidemark.errors import ConfigError
from tidemark.evolution import SchemaHistory
from tidemark.settings import Settings
from tidemark.table import Table

pytestmark = pytest.mark.unit


def _settings(tmp_path: Path, **changes: Any) -> Settings:
    return replace(Settings.from_env({"TIDEMARK_HOME": str(tmp_path / "home")}), **changes)


def test_a_job_opens_its_table_once_and_ensures_its_schema_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, config = _settings(tmp_path), events_config()
    ensured: list[str] = []
    ensure = SchemaHistory.ensure

    def counted(self: SchemaHistory, config: Any, run_id: str) -> Any:
        ensured.append(run_id)
        return ensure(self, config, run_id)

    monkeypatch.setattr(SchemaHistory, "ensure", counted)
    table = Table.open(config, settings).checked("run-1")  # what jobs.run_job does before Spark
    with table.held():
        inner = Table.open(config, settings)  # what the library's entry point does
        assert inner is table and inner.state is table.state
        assert inner.schema_version("run-1") == 1
        other = events_config(table="other_events")
        assert Table.open(other, settings) is not table  # another table: its own handle
    assert ensured == ["run-1"]
    assert Table.open(config, settings) is not table  # the job is over


def test_a_dry_run_records_no_schema_version(tmp_path: Path) -> None:
    settings, config = _settings(tmp_path), events_config()
    Table.open(config, settings).checked("dry", dry_run=True)
    assert Table.read(config, settings).state.schema_history.versions() == []
    Table.open(config, settings).checked("run-1")
    assert [v.version for v in Table.read(config, settings).state.schema_history.versions()] == [1]


def test_a_reader_opens_a_table_whose_layout_a_job_refuses(tmp_path: Path) -> None:
    """``output.layout: in_place`` on an object store stops every job of the table, named;
    the status page, the report and the web pages still read its state."""
    settings = _settings(tmp_path, warehouse="s3://bucket/warehouse")
    config = events_config(output__layout="in_place")
    assert Table.read(config, settings).state.commit_log.state().batches == 0
    with pytest.raises(ConfigError, match="in_place needs a filesystem with rename"):
        Table.open(config, settings)
