"""Schema evolution: which changes to a table's YAML schema are allowed, and the recorded
history of the schemas a table was written with.

Old hours are never rewritten when a schema changes, so a change is allowed only where every
old file still reads correctly under the new schema, by Spark and by Hive:

- a new nullable column (old hours read it as null; ``ALTER TABLE ... ADD COLUMNS``);
- a widening: ``tinyint -> smallint -> int -> bigint``, ``float -> double``, and
  ``decimal(p,s) -> decimal(p2,s)`` with ``p2 > p`` (Spark's Parquet reader promotes these);
- ``not null`` dropped from a column (a relaxation).

Everything else is refused, naming the column and the rule: a drop, a rename, a narrowing or
any other type change, a new ``not null`` column, ``not null`` added to a column, and a change
of the event-time field, its time zone or the partition columns (old hours are laid out by
them). The history is a create-only log in state (``<state>/<table>/schemas/``): version 1 is
the schema of the first job, each compatible change adds a version. A step that writes an
hour records the version it wrote with; the quality gate and a rebuild of that hour use it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tidemark.config import TableConfig
from tidemark.conversions import Conversion
from tidemark.errors import SchemaEvolutionError, StaleConfigError, StorageError
from tidemark.schema import Column, SqlType, parse_column
from tidemark.state.seqlog import SequentialLog
from tidemark.state.storage import Location

log = logging.getLogger(__name__)

_INTEGERS = ("tinyint", "smallint", "int", "bigint")
WIDENING_RULE = (
    "allowed type changes are widenings: tinyint -> smallint -> int -> bigint, float -> double, "
    "decimal(p,s) -> decimal(p2,s) with p2 > p"
)


@dataclass(frozen=True)
class SchemaVersion:
    """One recorded schema of a table: its columns (name, DDL type, nullable) and the fields
    that lay out its hours."""

    version: int
    columns: tuple[tuple[str, str, bool], ...]
    event_time_field: str
    time_zone: str
    partition_columns: tuple[str, ...]
    run_id: str = ""
    changes: tuple[str, ...] = ()
    # (column, Conversion.describe()) of source.conversions: how the version's batches decode
    conversions: tuple[tuple[str, str], ...] = ()
    output_format: str = "parquet"  # of the sealed hours: the metastore table is STORED AS it
    table_format: str = "hive"  # hive partitions or an Iceberg table (output.table_format)

    @classmethod
    def of(cls, config: TableConfig, version: int = 0, run_id: str = "") -> SchemaVersion:
        return cls(
            version=version,
            columns=tuple((c.name, c.type.ddl(), c.nullable) for c in config.schema_columns),
            event_time_field=config.event_time.field,
            time_zone=config.event_time.time_zone,
            partition_columns=tuple(config.partitioning.columns),
            run_id=run_id,
            conversions=tuple(sorted((k, v.describe()) for k, v in config.source.conversions.items())),
            output_format=config.output.format,
            table_format=config.output.table_format,
        )

    def same_schema(self, other: SchemaVersion) -> bool:
        return (
            sorted(self.columns) == sorted(other.columns)  # an order change alone is no new version
            and self.event_time_field == other.event_time_field
            and self.time_zone == other.time_zone
            and self.partition_columns == other.partition_columns
            and self.conversions == other.conversions
            and self.output_format == other.output_format
            and self.table_format == other.table_format
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "columns": [{"name": n, "type": t, "nullable": nullable} for n, t, nullable in self.columns],
            "event_time_field": self.event_time_field,
            "time_zone": self.time_zone,
            "partition_columns": list(self.partition_columns),
            "run_id": self.run_id,
            "changes": list(self.changes),
            "conversions": dict(self.conversions),
            "output_format": self.output_format,
            "table_format": self.table_format,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SchemaVersion:
        return cls(
            version=int(data["version"]),
            columns=tuple((c["name"], c["type"], bool(c["nullable"])) for c in data["columns"]),
            event_time_field=data["event_time_field"],
            time_zone=data["time_zone"],
            partition_columns=tuple(data["partition_columns"]),
            run_id=data.get("run_id", ""),
            changes=tuple(data.get("changes", ())),
            conversions=tuple(sorted(dict(data.get("conversions", {})).items())),
            output_format=data.get("output_format", "parquet"),
            table_format=data.get("table_format", "hive"),
        )

    def column_objects(self) -> list[Column]:
        parsed = []
        for name, ddl, nullable in self.columns:
            column = parse_column(name, ddl)
            parsed.append(Column(name=column.name, type=column.type, nullable=nullable))
        return parsed


def is_widening(old: SqlType, new: SqlType) -> bool:
    """True where Spark and Hive read a file of type ``old`` as ``new`` without loss."""
    if old.name in _INTEGERS and new.name in _INTEGERS:
        return _INTEGERS.index(new.name) > _INTEGERS.index(old.name)
    if (old.name, new.name) == ("float", "double"):
        return True
    if old.name == new.name == "decimal":
        return new.params[1] == old.params[1] and new.params[0] > old.params[0]
    return False


def evolution(old: SchemaVersion, new: SchemaVersion) -> tuple[list[str], list[str]]:
    """(allowed changes, refused changes) from ``old`` to ``new``, one readable line each;
    a refused line names the column and the rule it breaks."""
    allowed: list[str] = []
    refused: list[str] = []
    if new.event_time_field != old.event_time_field:
        refused.append(
            f"event_time.field: {old.event_time_field!r} -> {new.event_time_field!r}; rule: the "
            "event-time field never changes (old hours are partitioned by it)"
        )
    if new.time_zone != old.time_zone:
        refused.append(
            f"event_time.time_zone: {old.time_zone!r} -> {new.time_zone!r}; rule: the time zone of "
            "the hours never changes (old hours are laid out in it)"
        )
    if new.partition_columns != old.partition_columns:
        refused.append(
            f"partitioning.columns: {list(old.partition_columns)} -> {list(new.partition_columns)}; "
            "rule: the partitioning never changes (old hours are laid out by it)"
        )
    if new.output_format != old.output_format:
        refused.append(
            f"output.format: {old.output_format} -> {new.output_format}; rule: the format of the hours "
            "never changes (the metastore table is stored as it): land the topic in a new table"
        )
    if new.table_format != old.table_format:
        refused.append(
            f"output.table_format: {old.table_format} -> {new.table_format}; rule: the table format never "
            "changes (its hours are in one catalog or the other): land the topic in a new table"
        )
    old_columns = {name: (parse_column(name, ddl).type, nullable) for name, ddl, nullable in old.columns}
    new_columns = {name: (parse_column(name, ddl).type, nullable) for name, ddl, nullable in new.columns}
    added = [name for name in new_columns if name not in old_columns]
    for name, (old_type, old_nullable) in old_columns.items():
        if name not in new_columns:
            guesses = [a for a in added if new_columns[a][0] == old_type]
            hint = f" (renamed to {guesses[0]!r}?)" if guesses else ""
            refused.append(
                f"column {name!r} ({old_type.ddl()}) is gone{hint}; rule: columns are never dropped "
                "or renamed (old hours hold them): keep it, nullable, and add the new name as a "
                "new nullable column"
            )
            continue
        new_type, new_nullable = new_columns[name]
        if new_type != old_type:
            if is_widening(old_type, new_type):
                allowed.append(f"column {name!r}: widened {old_type.ddl()} -> {new_type.ddl()}")
            else:
                refused.append(
                    f"column {name!r}: {old_type.ddl()} -> {new_type.ddl()} is not a widening; "
                    f"rule: {WIDENING_RULE}"
                )
        if old_nullable and not new_nullable:
            refused.append(
                f"column {name!r} became 'not null'; rule: a column never becomes not null (old "
                "hours may hold nulls)"
            )
        elif new_nullable and not old_nullable:
            allowed.append(f"column {name!r}: 'not null' dropped")
    before, after = dict(old.conversions), dict(new.conversions)
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):  # decodes new batches; old ones keep theirs
            allowed.append(
                f"column {name!r}: conversion {before.get(name, 'none')} -> {after.get(name, 'none')}"
            )
    for name in added:
        new_type, nullable = new_columns[name]
        if not nullable:
            refused.append(
                f"new column {name!r} ({new_type.ddl()} not null) must be nullable; rule: old "
                "hours have no value for a new column and read it as null"
            )
        else:
            allowed.append(f"column {name!r} added ({new_type.ddl()}); old hours read it as null")
    return allowed, refused


def _read_cache(cache: Path | None) -> dict[str, Any]:
    try:
        return dict(json.loads(cache.read_text())) if cache is not None else {}
    except (OSError, ValueError):
        return {}  # none yet, or torn by a crash: read the history


def _write_cache(cache: Path, payload: dict[str, Any]) -> None:
    """Written aside and renamed: a parse that dies half-way leaves no torn cache. Always the
    local disk, not ``state.storage`` (with ``TIDEMARK_STORAGE=hadoop`` that would start a JVM
    in the DAG processor)."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        aside = cache.with_name(f".{cache.name}.{os.getpid()}")
        aside.write_text(json.dumps(payload))
        aside.replace(cache)
    except OSError as exc:  # a read-only home costs the reads, not the DAGs
        log.debug("schema check cache %s not written: %s", cache, exc)


class SchemaHistory:
    """The recorded schema versions of one table (create-only records in state)."""

    def __init__(self, state_dir: Location | Path, table: str) -> None:
        self.table = table
        self._log = SequentialLog(Location(state_dir) / table / "schemas")

    def versions(self) -> list[SchemaVersion]:
        return [SchemaVersion.from_json(record) for _, record in self._log.records()]

    def current(self) -> SchemaVersion | None:
        versions = self.versions()
        return versions[-1] if versions else None

    def check(self, config: TableConfig, cache: Path | None = None) -> list[str]:
        """The allowed changes from the recorded schema to the config's; SchemaEvolutionError
        (every refused change at once) if any is refused. Read-only: DAG files call it.

        ``cache`` (a local file, the DAG files' own): a passed check is kept with the newest
        record it read; while the config's schema is the same and no record follows that one
        (records are create-only, so the history is unchanged), the check costs one read
        instead of the whole history. A refusal is never cached, and every job checks again
        (``ensure``) before it writes."""
        wanted = SchemaVersion.of(config)
        keyed = {"state": str(self._log.directory), "schema": wanted.to_json()}
        digest = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()
        kept = _read_cache(cache)
        if kept.get("schema") == digest and self._log.read(int(kept["newest"]) + 1) is None:
            return list(kept["allowed"])
        versions = self.versions()
        allowed: list[str] = []
        if versions:
            allowed, refused = evolution(versions[-1], wanted)
            if refused:
                raise SchemaEvolutionError(self.table, refused, versions[-1].version)
        if cache is not None:
            _write_cache(cache, {"schema": digest, "newest": len(versions) - 1, "allowed": allowed})
        return allowed

    def ensure(self, config: TableConfig, run_id: str) -> SchemaVersion:
        """The version of the config's schema, recorded first if it is new (a compatible
        change); SchemaEvolutionError if it is not compatible. Safe to race: the loser of a
        create-only record re-reads and finds the winner's version."""
        for _ in range(5):
            versions = self.versions()
            current = versions[-1] if versions else None
            wanted = SchemaVersion.of(config, len(versions) + 1, run_id)
            if current is not None and current.same_schema(wanted):
                return current
            older = next((v for v in reversed(versions[:-1]) if v.same_schema(wanted)), None)
            if older is not None and current is not None:
                _, refused = evolution(current, wanted)
                raise StaleConfigError(self.table, older.version, current.version, current.run_id, refused)
            changes = self.check(config)
            record = replace(wanted, changes=tuple(changes))
            if self._log.create(len(versions), record.to_json()):
                if current is None:
                    log.info("%s: schema version 1 recorded (%s columns)", self.table, len(record.columns))
                else:
                    log.warning(
                        "%s: schema version %s recorded (run %s): %s",
                        self.table,
                        record.version,
                        run_id,
                        "; ".join(changes),
                    )
                return record
        raise StorageError(f"{self.table}: the schema history kept changing while recording a version")

    def version(self, number: int) -> SchemaVersion | None:
        record = self._log.read(number - 1) if number >= 1 else None
        return SchemaVersion.from_json(record) if record is not None else None

    def config_at(self, config: TableConfig, number: int | None) -> TableConfig:
        """``config`` with the columns of schema version ``number`` (unknown or None: as is):
        what a step re-reading an hour written with that version validates against."""
        version = self.version(number) if number else None
        if version is None or version.same_schema(SchemaVersion.of(config)):
            return config

        columns = {c.name: c for c in version.column_objects()}
        conversions = {name: Conversion.parse(described) for name, described in version.conversions}
        source = config.source.model_copy(update={"conversions": conversions})
        return config.model_copy(update={"columns": columns, "source": source})
