"""A table handle: what every job of one table needs, opened once per job and passed down
(a job serving many tables, a group's, opens one per table).

It holds the table's config, its state (``TableState``: commit log, journal, locks, schema
history), where its files live (``Layout``) and how a version of its hours becomes visible
(``HourCommit``, chosen once from the warehouse URL and ``output.layout``). The schema version
of the config, and its layout against the sealed hours', are checked once per handle, on first
use: a dry run never records one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidemark.config import TableConfig
from tidemark.errors import ConfigError
from tidemark.hourcommit import hour_commit, layout_problem, version_kind
from tidemark.hourcommit.base import HourCommit
from tidemark.settings import Settings
from tidemark.state.layout import Layout
from tidemark.table_state import TableState


@dataclass
class Table:
    """One table, as a job sees it."""

    config: TableConfig
    settings: Settings
    state: TableState
    layout: Layout
    commit: HourCommit
    _schema_version: int | None = field(default=None, repr=False)

    @classmethod
    def open(cls, config: TableConfig, settings: Settings) -> Table:
        kind = version_kind(config.table, settings.warehouse.rstrip("/"), config.output)
        layout = Layout(settings, config.table, kind=kind)
        commit = hour_commit(layout, config.output.table_format, settings)
        return cls(config, settings, TableState(settings.state_location, config.table), layout, commit)

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
        problem = layout_problem(self.commit, self.config.output, sealed)
        if problem is not None:
            raise ConfigError(self.name, [problem])
