"""Every DAG of every table, keyed by dag id: what ``dags/tidemark_ingest.py`` registers.

Each kind has one builder module; a table gets the kinds that fit it (bootstrap and merge
only for CDC tables). A new DAG kind is a builder here and a name in ``common.DAG_KINDS``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tidemark.airflow.ingest import ingest_dag
from tidemark.airflow.seal import rebuild_dag, seal_dag
from tidemark.airflow.snapshot import bootstrap_dag, merge_dag
from tidemark.airflow.stream import stream_dag
from tidemark.config import TableConfig, collisions, load_table_file, table_files
from tidemark.settings import Settings

log = logging.getLogger(__name__)
Builder = Callable[[TableConfig, Settings], Any]


def builders_for(config: TableConfig) -> list[Builder]:
    """The DAG kinds of one table: ingest, seal, rebuild and stream; bootstrap and merge for
    CDC tables."""
    kinds: list[Builder] = [ingest_dag, seal_dag, rebuild_dag, stream_dag]
    if config.cdc is not None:
        kinds += [bootstrap_dag, merge_dag]
    return kinds


def all_dags(settings: Settings | None = None) -> dict[str, Any]:
    """Every DAG of every table that can run, keyed by dag id. A table whose YAML is invalid,
    or whose schema is not a compatible change of its recorded one, has no DAGs: it
    disappears alone, and ``dags/tidemark_config_errors.py`` shows why as an import error."""
    settings = settings or Settings.from_env()
    configs, _ = tables_apart(settings)
    dags = [build(config, settings) for config in configs for build in builders_for(config)]
    return {dag.dag_id: dag for dag in dags}


def tables_apart(settings: Settings) -> tuple[list[TableConfig], dict[str, str]]:
    """The tables that can run, and for every table file that cannot, why (file -> problem):
    one table's mistake never takes the others' DAGs with it."""
    from tidemark.errors import ConfigError, SchemaEvolutionError
    from tidemark.evolution import SchemaHistory

    configs: list[TableConfig] = []
    problems: dict[str, str] = {}
    for path in table_files(settings):
        try:
            config = load_table_file(path)
            SchemaHistory(settings.state_location, config.table).check(config)
        except (ConfigError, SchemaEvolutionError) as exc:
            problems[str(path)] = str(exc)
            log.error("tidemark: %s has no DAGs: %s", path, exc)
            continue
        configs.append(config)
    colliding = dict(collisions(configs))
    for config in configs:
        if config.table in colliding:
            problems[str(settings.conf_dir / f"{config.table}.yaml")] = colliding[config.table]
    return [c for c in configs if c.table not in colliding], problems


def raise_table_problems(settings: Settings | None = None) -> None:
    """``dags/tidemark_config_errors.py``: the table files that cannot run, as one import
    error naming each file and its problem (nothing when every table is fine)."""
    from tidemark.errors import TableFilesError

    _, problems = tables_apart(settings or Settings.from_env())
    if problems:
        raise TableFilesError(problems)
