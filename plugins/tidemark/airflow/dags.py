"""Every DAG of every table, keyed by dag id: what ``dags/tidemark_ingest.py`` registers.

Each kind has one builder module; a table gets the kinds that fit it (bootstrap and merge
only for CDC tables). A new DAG kind is a builder here and a name in ``common.DAG_KINDS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidemark.airflow.ingest import ingest_dag
from tidemark.airflow.seal import rebuild_dag, seal_dag
from tidemark.airflow.snapshot import bootstrap_dag, merge_dag
from tidemark.airflow.stream import stream_dag
from tidemark.config import TableConfig, load_tables
from tidemark.settings import Settings

Builder = Callable[[TableConfig, Settings], Any]


def builders_for(config: TableConfig) -> list[Builder]:
    """The DAG kinds of one table: ingest, seal, rebuild and stream; bootstrap and merge for
    CDC tables."""
    kinds: list[Builder] = [ingest_dag, seal_dag, rebuild_dag, stream_dag]
    if config.cdc is not None:
        kinds += [bootstrap_dag, merge_dag]
    return kinds


def all_dags(settings: Settings | None = None) -> dict[str, Any]:
    """Every DAG of every table YAML, keyed by dag id; a table whose YAML schema is not a
    compatible change of its recorded one fails the import (SchemaEvolutionError)."""
    from tidemark.evolution import SchemaHistory

    settings = settings or Settings.from_env()
    configs = load_tables(settings)
    for config in configs:  # an incompatible schema change is an import error naming the column
        SchemaHistory(settings.state_location, config.table).check(config)
    dags = [build(config, settings) for config in configs for build in builders_for(config)]
    return {dag.dag_id: dag for dag in dags}
