"""The ``tidemark-dev`` command line: the local services and the demo of a development machine.

Kept apart from ``tidemark`` (the operator's command, which a production image installs
without ``tidemark_dev``): nothing here is needed to run tables."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from tidemark import __version__
from tidemark.cli import run_command
from tidemark.settings import Settings
from tidemark_dev.demo import run_demo
from tidemark_dev.local import SERVICES, resolve
from tidemark_dev.services import AirflowService

EPILOG = """\
examples:
  tidemark-dev services start            start the local broker: Apache Kafka (KRaft; PLAINTEXT,
                                         SSL, SASL_SSL listeners; topics kept across restarts)
  tidemark-dev services start broker airflow
                                         broker + Airflow standalone
  tidemark-dev services start broker derby-metastore airflow
                                         what `make up` runs: the seals register over Thrift
  tidemark-dev services start tansu      the lightest broker instead (memory: a restart loses topics)
  tidemark-dev services start postgres metastore
                                         tidemark's own PostgreSQL and the Hive metastore service on it
  tidemark-dev services status all       which local services run and answer
  tidemark-dev demo                      the pipelines through Airflow on embedded defaults (`make demo`)
"""


def _cmd_services(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    names = resolve(args.names, every=args.action == "stop")
    if args.action == "start":
        for name in names:
            # read again for each: a service started before it may change the settings (Airflow's
            # metastore pool has 16 slots once derby-metastore runs)
            service = SERVICES[name](Settings.from_env())
            print(f"starting {name} ...", flush=True)
            print(service.start().line())
            if isinstance(service, AirflowService):
                print(service.login_hint())
    elif args.action == "stop":
        for name in reversed(names):
            stopped = SERVICES[name](settings).stop()
            if stopped or "all" not in args.names:
                print(f"{name:8} {'stopped' if stopped else 'was not running'}")
    else:
        statuses = [SERVICES[n](settings).status() for n in names]
        if args.json:
            print(json.dumps([{**s.__dict__, "log_file": str(s.log_file)} for s in statuses], indent=2))
        else:
            for status in statuses:
                print(status.line())
        return 0 if all(s.answering for s in statuses) else 3
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(scale=args.scale)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidemark-dev",
        description="Local services (pid and log files under $TIDEMARK_HOME) and the demo.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tidemark {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    services = sub.add_parser(
        "services",
        help="start, stop or check the local services",
        description="Manage local services (pid and log files under $TIDEMARK_HOME). "
        f"Names: {', '.join(SERVICES)}, all (default: broker).",
    )
    services.add_argument("action", choices=["start", "stop", "status"])
    services.add_argument("names", nargs="*", metavar="NAME", help="a service, or all (default: broker)")
    services.add_argument("--json", action="store_true", help="status as JSON")
    services.set_defaults(func=_cmd_services)

    demo = sub.add_parser(
        "demo", help="the ingest DAG through Airflow end to end on embedded defaults (what `make demo` runs)"
    )
    demo.add_argument("--scale", type=int, default=6_000, help="messages of the first run (default 6000)")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
