"""``tidemark tables`` (list, validate, show, init) and ``tidemark schema``: the table configs
and their recorded schema history, checked without Spark."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_tables_command(sub: Any) -> None:
    """``tidemark tables list|validate|show|init`` on the CLI's subparsers."""
    tables = sub.add_parser("tables", help="list, validate or show table configs")
    tables.add_argument("action", choices=["list", "validate", "show", "init"])
    tables.add_argument(
        "table",
        nargs="?",
        help="show: one table's effective configuration, defaults included; init: its name",
    )
    tables.add_argument("--json", action="store_true", help="show: as JSON")
    tables.add_argument(
        "--from-registry", metavar="SUBJECT", help="init: the subject whose latest schema it reads"
    )
    tables.add_argument("--registry-url", metavar="URL", help="init: the Schema Registry")
    tables.add_argument("--topic", help="init: the topic (default: the subject without -value)")
    tables.add_argument(
        "--message", metavar="NAME", help="init, Protobuf: the topic's message type (full name)"
    )
    tables.add_argument(
        "--event-time", metavar="FIELD", help="init: the event-time field (default: the first timestamp)"
    )
    tables.add_argument(
        "--write", action="store_true", help="init: write conf/tables/<table>.yaml instead of printing it"
    )
    tables.set_defaults(func=cmd_tables)


def cmd_tables(args: argparse.Namespace) -> int:
    import yaml

    from tidemark.catalog import load_table
    from tidemark.config import effective_config, load_table_file, table_files
    from tidemark.errors import ConfigError, SchemaEvolutionError, SchemaRegistryUnavailableError
    from tidemark.ingest.registry_tables import subject_versions
    from tidemark.settings import Settings
    from tidemark.table import Table

    settings = Settings.from_env()
    if args.action == "init":
        return _init_from_registry(args, settings)
    if args.action == "show" and args.table:
        config = load_table(args.table, settings)
        effective = effective_config(config)
        if args.json:
            print(json.dumps(effective, indent=2, default=str))
        else:
            print(f"# {config.table}: the effective configuration, defaults included")
            print(yaml.safe_dump(effective, sort_keys=False, default_flow_style=False).rstrip())
        return 0
    from tidemark.catalog.families import family_tables, origin

    failures = 0
    configs: list[tuple[str, Any]] = []
    for path in table_files():
        try:
            configs.append((str(path), load_table_file(path)))
        except ConfigError as exc:
            failures += 1
            print(exc, file=sys.stderr)
    members, broken = family_tables(settings)  # the families' recorded members, and their mistakes
    configs += [(origin(m, settings), m) for m in members]
    for problem in broken.values():
        failures += 1
        print(problem, file=sys.stderr)
    for where, config in configs:
        if args.action == "show":
            print(json.dumps(effective_config(config), indent=2, default=str))
            continue
        try:  # the YAML is valid on its own: is it a compatible change of the recorded schema?
            Table.read(config, settings).state.schema_history.check(config)
            # and does the producers' latest schema read into it?
            refused = [v for v in subject_versions(config, latest_only=True) if v.problem]
        except (SchemaEvolutionError, SchemaRegistryUnavailableError) as exc:
            failures += 1
            print(exc, file=sys.stderr)
            continue
        if refused:
            failures += 1
            print(f"{where}: the registry's latest schema does not read into the table:", file=sys.stderr)
            for version in refused:
                print(f"  - {version.line()}", file=sys.stderr)
            continue
        print(f"{config.table:16} topic={config.source.topic:16} {where}  ok")
    return 1 if failures else 0


def _init_from_registry(args: argparse.Namespace, settings: Any) -> int:
    """``tables init --from-registry SUBJECT``: a table YAML from the subject's latest schema."""
    from tidemark.ingest.registry import SchemaRegistry, UnknownSchemaIdError
    from tidemark.ingest.registry_tables import table_yaml

    if not args.from_registry or not args.registry_url:
        print("tidemark: tables init needs --from-registry SUBJECT and --registry-url URL", file=sys.stderr)
        return 2
    subject = args.from_registry
    topic = args.topic or subject.removesuffix("-value")
    table = args.table or topic.replace("-", "_").replace(".", "_").lower()
    try:
        registry = SchemaRegistry(table, {"url": args.registry_url})
        latest = registry.latest(subject)
        if latest.schema_type == "PROTOBUF":  # as the decoder reads it: a serialized descriptor
            registry = SchemaRegistry(table, {"url": args.registry_url}, serialized=True)
            latest = registry.latest(subject)
        imports = registry.imports(latest)
    except UnknownSchemaIdError:
        print(f"tidemark: {args.registry_url} has no subject {subject!r}", file=sys.stderr)
        return 2
    try:
        text = table_yaml(
            latest,
            table=table,
            topic=topic,
            registry_url=args.registry_url,
            event_time=args.event_time,
            imports=imports,
            message=args.message,
        )
    except ValueError as exc:
        print(f"tidemark: {exc}", file=sys.stderr)
        return 2
    if not args.write:
        print(text, end="")
        return 0
    path = settings.conf_dir / f"{table}.yaml"
    if path.exists():
        print(f"tidemark: {path} exists; not overwritten", file=sys.stderr)
        return 2
    path.write_text(text)
    print(f"wrote {path} from {subject} v{latest.version}; check it with: tidemark tables validate")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from tidemark.catalog import load_table
    from tidemark.evolution import SchemaVersion, evolution
    from tidemark.ingest.registry_tables import subject_versions
    from tidemark.settings import Settings
    from tidemark.table import Table

    settings = Settings.from_env()
    config = load_table(args.table, settings)
    versions = Table.read(config, settings).state.schema_history.versions()
    allowed, refused = evolution(versions[-1], SchemaVersion.of(config)) if versions else ([], [])
    registry = subject_versions(config)
    registry_refused = [v for v in registry if v.problem]
    if args.json:
        info = {
            "table": config.table,
            "versions": [v.to_json() for v in versions],
            "yaml": {"allowed": allowed, "refused": refused},
            "registry": [
                {
                    "subject": v.schema.subject,
                    "version": v.schema.version,
                    "id": v.schema.schema_id,
                    "problem": v.problem,
                }
                for v in registry
            ],
        }
        print(json.dumps(info, indent=2))
        return 2 if refused or registry_refused else 0
    if registry:
        print(f"the registry's versions of {config.source.subject} against the YAML:")
        for version in registry:
            print(f"  {version.line()}")
    for v in versions:
        columns = ", ".join(f"{n} {t}{'' if nullable else ' not null'}" for n, t, nullable in v.columns)
        print(f"v{v.version} (run {v.run_id or '-'}): {columns}")
        for change in v.changes:
            print(f"    {change}")
    if not versions:
        print(f"{config.table}: no schema recorded yet (the first job records the YAML's as v1)")
    elif refused:
        print(f"the YAML's schema is REFUSED against v{versions[-1].version}:")
        for line in refused:
            print(f"  - {line}")
        return 2
    elif allowed:
        print(f"the YAML's schema is a compatible change; the next job records v{len(versions) + 1}:")
        for line in allowed:
            print(f"  - {line}")
    else:
        print(f"the YAML's schema is v{versions[-1].version}")
    return 2 if registry_refused else 0


def cmd_maintain(args: argparse.Namespace) -> int:
    """``tidemark maintain``: what ``tidemark_maintain_<table>`` runs, now."""
    import json
    from datetime import UTC, datetime

    from tidemark.catalog import load_table
    from tidemark.seal.maintenance import maintain
    from tidemark.settings import Settings
    from tidemark.table import Table

    settings = Settings.from_env()
    result = maintain(
        Table.open(load_table(args.table, settings), settings), datetime.now(UTC), dry_run=args.dry_run
    )
    print(json.dumps(result.to_json(), indent=2))
    return 0
