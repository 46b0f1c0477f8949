"""Reading a table's YAML into its model: the validation errors as lines that each name the
file, the key and what was expected, all at once; and the configuration as a person reads it
(defaults included, durations as ``10m``, secrets masked)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tidemark.config.source import read_schema_files
from tidemark.config.table import TableConfig
from tidemark.durations import format_duration
from tidemark.errors import ConfigError
from tidemark.masking import masked
from tidemark.settings import Settings


def _allowed_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys a model accepts at ``loc`` (to say what was expected for an unknown key)."""
    model: Any = TableConfig
    for part in loc[:-1]:
        fields = getattr(model, "model_fields", None)
        if not fields:
            return []
        by_alias = {f.alias or n: f for n, f in fields.items()}
        info = by_alias.get(str(part))
        if info is None:
            return []
        model = info.annotation
        if getattr(model, "__args__", None):  # Optional[X] -> X
            model = next((a for a in model.__args__ if hasattr(a, "model_fields")), None)
    fields = getattr(model, "model_fields", {})
    return sorted((f.alias or n) for n, f in fields.items())


def _describe(error: Any) -> str:
    loc = tuple(error["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    kind = error["type"]
    msg = str(error["msg"]).removeprefix("Value error, ")
    if not loc:  # cross-field checks name their own keys, one per line
        return msg
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc)
        return f"{key}: unknown key" + (f"; expected one of: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return f"{key}: missing required key"
    if kind in {"literal_error", "int_parsing", "float_parsing", "greater_than", "less_than_equal"}:
        return f"{key}: {msg} (got {error.get('input')!r})"
    return f"{key}: {msg}"


def parse_table(data: object, source: str) -> TableConfig:
    """Validate already-loaded YAML data; ``source`` names the file in errors."""
    if not isinstance(data, dict):
        raise ConfigError(source, ["(top level): expected a mapping of keys such as table, source, schema"])
    try:
        return TableConfig.model_validate(data)
    except ValidationError as exc:
        problems = [line for e in exc.errors() for line in _describe(e).splitlines()]
        raise ConfigError(source, problems) from None


def load_table_file(path: Path) -> TableConfig:
    """Load and validate one table YAML; the table name must match the file name."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"(top level): not valid YAML: {exc}"]) from None
    config = parse_table(read_schema_files(data, str(path), path.parent), str(path))
    if config.table != path.stem:
        raise ConfigError(str(path), [f"table: {config.table!r} must match the file name {path.stem!r}"])
    return config


def table_files(settings: Settings | None = None) -> list[Path]:
    settings = settings or Settings.from_env()
    return sorted(settings.conf_dir.glob("*.yaml"))


def effective_config(config: TableConfig) -> dict[str, Any]:
    """The configuration a table runs with, defaults included, as a person reads it: durations
    as ``10m``, columns as their DDL, secrets in ``kafka_properties`` masked."""

    def readable(value: Any) -> Any:
        if isinstance(value, timedelta):
            return format_duration(value)
        if isinstance(value, dict):
            return {k: readable(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [readable(v) for v in value]
        return value

    data = readable(config.model_dump(mode="python", by_alias=True, exclude={"columns"}))
    data["source"]["kafka_properties"] = masked(config.source.kafka_properties)
    if config.source.schema_registry is not None:
        data["source"]["schema_registry"] = masked(config.source.schema_registry.client_properties())
    columns = {c.name: c.type.ddl() + ("" if c.nullable else " not null") for c in config.schema_columns}
    return {"table": data.pop("table"), "description": data.pop("description"), "schema": columns, **data}
