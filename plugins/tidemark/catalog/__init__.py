"""The tables of a deployment by name: the table YAMLs of the conf dir and the members the
topic families recorded. Above both ``config`` (one file's parse) and ``families`` (one
family's members), so neither needs the other's loader."""

from __future__ import annotations

from tidemark.catalog.families import family_tables, find_member, origin
from tidemark.config import TableConfig, load_table_file, table_files
from tidemark.errors import ConfigError
from tidemark.settings import Settings


def load_table(name: str, settings: Settings | None = None) -> TableConfig:
    """Load table ``name`` from the configured conf dir."""
    settings = settings or Settings.from_env()
    path = settings.conf_dir / f"{name}.yaml"
    if not path.is_file():
        member = find_member(name, settings)
        if member is not None:
            return member
        known = ", ".join(p.stem for p in table_files(settings)) or "none"
        raise ConfigError(str(path), [f"(file): no such table config; known tables: {known}"])
    return load_table_file(path)


def load_tables(settings: Settings | None = None) -> list[TableConfig]:
    """All table configs (the YAML files and the families' recorded members), sorted by
    name; a table named like another's side table (``__late``, ``__dirty``, ``_snapshot``)
    or a broken family is refused."""
    tables = [load_table_file(p) for p in table_files(settings)]
    members, broken = family_tables(settings or Settings.from_env())
    tables += [m for m in members if m.table not in {t.table for t in tables}]
    problems = [problem for _, problem in collisions(tables)] + list(broken.values())
    if problems:
        raise ConfigError("conf/tables", problems)
    return sorted(tables, key=lambda t: t.table)


def collisions(tables: list[TableConfig]) -> list[tuple[str, str]]:
    """(table, problem) of each table named like another's side table."""
    names = {t.table for t in tables}
    return [
        (name, f"{other.table}: table {name!r} collides with {kind} of table {other.table!r}")
        for other in tables
        for kind, name in (
            ("the late table", other.late_table),
            ("the dirty table", other.dirty_table),
            ("the snapshot table", other.snapshot_table),
            ("the fresh table", other.fresh_table),
        )
        if name in names
    ]


def table_configs(settings: Settings) -> tuple[list[TableConfig], dict[str, str]]:
    """Every table config that loads: the table YAMLs, then the families' members (a member
    named like a table file is refused: the file wins), and for each one that does not, why
    (where -> problem)."""
    configs: list[TableConfig] = []
    problems: dict[str, str] = {}
    for path in table_files(settings):
        try:
            configs.append(load_table_file(path))
        except ConfigError as exc:
            problems[str(path)] = str(exc)
    members, problems_of_families = family_tables(settings)
    problems.update(problems_of_families)
    explicit = {c.table for c in configs}
    claimed: dict[str, TableConfig] = {}  # table -> the member of another family that holds it
    for member in members:
        where = origin(member, settings)
        if member.table in explicit:
            problems[where] = str(
                ConfigError(where, [f"table {member.table!r}: a table file of that name exists"])
            )
        elif member.table in claimed:  # two families' topics read as one table: the first holds it
            holder = claimed[member.table]
            problems[where] = str(
                ConfigError(
                    where,
                    [
                        f"table {member.table!r} of topic {member.source.topic!r} is already the table of "
                        f"topic {holder.source.topic!r} ({origin(holder, settings)}): one table per topic; "
                        "narrow one family's pattern or change its table template"
                    ],
                )
            )
        else:
            claimed[member.table] = member
            configs.append(member)
    return configs, problems
