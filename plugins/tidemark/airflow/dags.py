"""Every DAG of every table, keyed by dag id: what the ``dags/tidemark_tables_<shard>.py``
files register.

Each kind has one builder module; a table gets the kinds that fit it (bootstrap and merge
only for CDC tables). A new DAG kind is a builder here and a name in ``dag_ids.DAG_KINDS``.

The tables are spread over ``SHARDS`` DAG files by a stable hash of their names, because
Airflow gives each file its own parse (``dagbag_import_timeout``, 30 s by default, and its
own process): building a table's four to six DAGs costs Airflow about 20 ms, so one file of
1,000 tables would take longer than that, while each of eight files takes a few seconds.
A table never moves between files unless ``SHARDS`` changes; a group's DAG (and a family's
discovery DAG) is built in the file its name hashes to.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidemark.airflow.decide import decide_dag
from tidemark.airflow.family import discovery_dag
from tidemark.airflow.group import group_dag
from tidemark.airflow.ingest import ingest_dag
from tidemark.airflow.maintain import maintain_dag
from tidemark.airflow.seal import rebuild_dag, seal_dag
from tidemark.airflow.snapshot import bootstrap_dag, merge_dag
from tidemark.airflow.stream import stream_dag
from tidemark.catalog import collisions, table_configs
from tidemark.catalog.families import family_files, load_family, origin
from tidemark.config import TableConfig
from tidemark.group.members import disagreements, groups_of
from tidemark.settings import Settings

log = logging.getLogger(__name__)
Builder = Callable[[TableConfig, Settings], Any]

SHARDS = 8  # the dags/tidemark_tables_<0..7>.py files


def shard_of(table: str) -> int:
    """The DAG file of a table: a stable hash of its name (not Python's salted ``hash``)."""
    return zlib.crc32(table.encode()) % SHARDS


def shard_dags(dag_file: str, settings: Settings | None = None) -> dict[str, Any]:
    """The DAGs of the tables of the shard a DAG file is named for (``..._<shard>.py``)."""
    found = re.search(r"_(\d+)\.py$", Path(dag_file).name)
    if found is None or int(found.group(1)) >= SHARDS:
        raise ValueError(f"{dag_file}: a shard DAG file is named tidemark_tables_<0..{SHARDS - 1}>.py")
    return all_dags(settings, shard=int(found.group(1)))


def builders_for(config: TableConfig) -> list[Builder]:
    """The DAG kinds of one table: ingest, seal, rebuild, stream, maintain (the lake check;
    an Iceberg table's expiry first) and decide (a way out, approved by a person); bootstrap and
    merge for CDC tables."""
    kinds: list[Builder] = [seal_dag, rebuild_dag, stream_dag]
    if config.group is None:  # a group's tables are dumped and sealed by the group's DAG
        kinds.insert(0, ingest_dag)
    if config.cdc is not None:
        kinds += [bootstrap_dag, merge_dag]
    kinds += [maintain_dag, decide_dag]
    return kinds


def all_dags(settings: Settings | None = None, shard: int | None = None) -> dict[str, Any]:
    """Every DAG of every table that can run (of one ``shard``, or all), keyed by dag id. A
    table whose YAML is invalid, or whose schema is not a compatible change of its recorded
    one, has no DAGs: it disappears alone, and ``dags/tidemark_config_errors.py`` shows why as
    an import error."""
    settings = settings or Settings.from_env()
    runnable, _ = tables_apart(settings, shard)
    mine = [c for c in runnable if shard is None or shard_of(c.table) == shard]
    dags = [build(config, settings) for config in mine for build in builders_for(config)]
    dags += [
        group_dag(group, members, settings)
        for group, members in groups_of(runnable).items()
        if shard is None or shard_of(group) == shard
    ]
    dags += family_dags(settings, runnable, shard)
    return {dag.dag_id: dag for dag in dags}


def family_dags(settings: Settings, configs: list[TableConfig], shard: int | None) -> list[Any]:
    """The discovery DAG of every family that loads (one that does not is an import error of
    the config-errors file), in the file its name hashes to."""
    from tidemark.errors import ConfigError

    dags = []
    for path in family_files(settings):
        if shard is not None and shard_of(path.stem) != shard:
            continue
        try:
            family = load_family(path)
        except ConfigError:
            continue
        members = [c.table for c in configs if c.family == family.name]
        dags.append(discovery_dag(family, members, settings))
    return dags


def tables_apart(settings: Settings, shard: int | None = None) -> tuple[list[TableConfig], dict[str, str]]:
    """The tables that can run, and for every table file that cannot, why (file -> problem):
    one table's mistake never takes the others' DAGs with it. Every YAML is read (names
    collide across shards, a group's DAG names tables of every shard); the schema history
    only of ``shard``'s tables (those of other shards are checked by their own file, and a
    group job checks each table again before it writes)."""
    from tidemark.errors import ConfigError, SchemaEvolutionError
    from tidemark.table import Table

    loaded, problems = table_configs(settings)
    loaded = [c for c in loaded if not c.source.done]  # a done family member: nothing left to run
    for where, problem in problems.items():
        log.error("tidemark: %s has no DAGs: %s", where, problem)
    configs: list[TableConfig] = []
    for config in loaded:
        try:
            if shard is None or shard_of(config.table) == shard:  # the shard's tables only
                cache = settings.home / "cache" / "schema-checks" / f"{config.table}.json"
                Table.read(config, settings).state.schema_history.check(config, cache)
        except (ConfigError, SchemaEvolutionError) as exc:
            problems[origin(config, settings)] = str(exc)
            log.error("tidemark: %s has no DAGs: %s", origin(config, settings), exc)
            continue
        configs.append(config)
    refused = dict(collisions(configs)) | dict(disagreements(configs))
    for config in configs:
        if config.table in refused:
            problems[origin(config, settings)] = refused[config.table]
    return [c for c in configs if c.table not in refused], problems


def raise_table_problems(settings: Settings | None = None) -> None:
    """``dags/tidemark_config_errors.py``: the table files that cannot run, as one import
    error naming each file and its problem (nothing when every table is fine)."""
    from tidemark.errors import TableFilesError

    _, problems = tables_apart(settings or Settings.from_env())
    if problems:
        raise TableFilesError(problems)
