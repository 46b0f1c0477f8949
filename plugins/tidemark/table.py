"""A table handle, the one door to a table's state: what every job of one table needs,
opened once per job and passed down (a job serving many tables, a group's, opens one per
table), and what a reader (status, the report, the web pages) reads.

It holds the table's config, its state (``TableState``: commit log, journal, locks, schema
history), where its files live (``Layout``) and how a version of its hours becomes visible
(``HourCommit``: its inputs, versions and publication, composed once from the warehouse URL,
``output.layout`` and ``output.table_format``). The schema version
of the config, and its layout against the sealed hours', are checked once per handle, on first
use: a dry run never records one.

A job opens its table once: the job's runner (``jobs.run_job``, a group's ``run_table``)
opens the handle, ensures its schema version before Spark starts, and holds it (``held``)
while the job runs, so the library's entry points it calls (``Table.open`` of the same
config and settings) get that handle back instead of opening the state again.

``TableState`` is built here only (an import-linter contract in pyproject.toml): a job opens
``Table.open``, a reader ``Table.read`` (no layout chosen, so a reader never refuses a table
for its ``output.layout``), and a task that knows only a table's name ``Table.state_of``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tidemark.config import TableConfig
from tidemark.errors import ConfigError
from tidemark.hourcommit import HourCommit, hour_commit, layout_problem, version_kind
from tidemark.settings import Settings
from tidemark.state.layout import Layout
from tidemark.state.storage import Location
from tidemark.table_state import TableState


@dataclass
class Table:
    """One table, as a job sees it."""

    config: TableConfig
    settings: Settings
    state: TableState
    _schema_version: int | None = field(default=None, repr=False)

    @classmethod
    def open(cls, config: TableConfig, settings: Settings) -> Table:
        """A job's handle: its layout and ``HourCommit`` chosen now (a bad ``output.layout``
        refused before anything runs); the running job's own, if it holds one of this table."""
        for held in _HELD.get():
            if held.config == config and held.settings == settings:
                return held
        table = cls.read(config, settings)
        assert table.commit is not None  # chosen now
        return table

    def checked(self, run_id: str, *, dry_run: bool = False) -> Table:
        """The handle, its config's schema version ensured (only checked on a dry run, which
        records nothing): an incompatible change refused before a job starts Spark."""
        if dry_run:
            self.state.schema_history.check(self.config)
        else:
            self.schema_version(run_id)
        return self

    @contextmanager
    def held(self) -> Iterator[Table]:
        """While a job runs: ``Table.open`` of this table returns this handle."""
        token = _HELD.set((*_HELD.get(), self))
        try:
            yield self
        finally:
            _HELD.reset(token)

    @classmethod
    def read(cls, config: TableConfig, settings: Settings) -> Table:
        """A reader's handle: state records opened as they are read."""
        return cls(config, settings, cls.state_of(settings.state_location, config.table))

    @staticmethod
    def state_of(state_dir: Location | Path, table: str) -> TableState:
        """The state of ``table`` under ``state_dir``, for a task that has its name only (an
        Airflow page, a stream's source options) and reads no config."""
        return TableState(state_dir, table)

    @cached_property
    def layout(self) -> Layout:
        """Where the table's files live, by the warehouse URL and ``output.layout``."""
        kind = version_kind(self.name, self.settings.warehouse.rstrip("/"), self.config.output)
        return Layout(self.settings, self.name, kind=kind)

    @cached_property
    def commit(self) -> HourCommit:
        """How a version of an hour becomes visible, composed once."""
        config = self.config
        return hour_commit(self.layout, config.output.table_format, self.settings, config.late_table)

    @property
    def name(self) -> str:
        return self.config.table

    def schema_version(self, run_id: str) -> int:
        """The schema version of the config (recorded first if it is a new, compatible one:
        an older YAML than the table's is refused here, before anything is written); read once
        per handle, not once per hour a job writes."""
        if self._schema_version is None:
            self.check_layout()
            self._schema_version = self.state.schema_history.ensure(self.config, run_id).version
        return self._schema_version

    def check_layout(self) -> None:
        """Refuses ``output.layout`` changed under sealed hours, before a writer touches one
        (a dump too: its publisher follows the layout, and late rows published one way are
        not where the other way's amend looks)."""
        sealed = (f for entry in self.state.journal.state().hours.values() for f in entry.files)
        problem = layout_problem(self.commit.versions, self.config.output, sealed)
        if problem is not None:
            raise ConfigError(self.name, [problem])


# the handles the running job holds (``Table.held``): one per table it serves
_HELD: ContextVar[tuple[Table, ...]] = ContextVar("tidemark_held_tables", default=())
