"""Spark jobs from both ends: how one is launched (``SparkJob``: the application and its
arguments, the one definition the DAG tasks and the CLI share) and the skeleton every
``spark_jobs/*.py`` entry point runs: common arguments, logging, the table config, the Spark
session (always stopped) and one JSON line of result on stdout, which the Airflow task log
shows and tests parse."""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tidemark.catalog import load_table
from tidemark.delta_spark import delta_spark_conf
from tidemark.errors import TidemarkError
from tidemark.group.members import group_members
from tidemark.hourcommit import publication_kind
from tidemark.iceberg_catalog import iceberg_writer_conf, open_catalog, secret_conf_keys
from tidemark.lazy_session import LazySession
from tidemark.settings import Settings
from tidemark.spark import (
    build_session,
    driver_class_path,
    driver_java_options,
    jdbc_driver_class_path,
    metastore_conf,
    planned_session_conf,
    s3a_conf,
    s3a_jars,
)
from tidemark.table import Table
from tidemark.tablefs import needs_s3a

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidemark.config import TableConfig

Body = Callable[["SparkSession", "TableConfig", "Settings", argparse.Namespace], Any]


@dataclass(frozen=True)
class SparkJob:
    """``spark_jobs/<job>.py`` for one table: what the DAG's SparkSubmitOperator and
    ``tidemark <job>`` both submit."""

    job: str
    table: str  # the table, or the group of a group job
    args: list[str] = field(default_factory=list)  # after --table (--group)
    target: str = "--table"  # --group: spark_jobs/group.py, one application for a group's tables

    @classmethod
    def from_arguments(cls, application: str, arguments: Sequence[str]) -> SparkJob | None:
        """The job a spark-submit of ``application`` with ``arguments`` runs (as
        :attr:`arguments` gives them); None without ``--table`` or ``--group``."""
        args = list(arguments)
        target = "--group" if "--group" in args else "--table"
        if target not in args or args.index(target) + 1 >= len(args):
            return None
        at = args.index(target)
        return cls(Path(application).stem, args[at + 1], args[at + 2 :], target=target)

    @property
    def group_job(self) -> str:
        """The job a group application runs for its tables (after ``--job``); "" otherwise."""
        if self.target == "--group" and "--job" in self.args[:-1]:
            return self.args[self.args.index("--job") + 1]
        return ""

    @classmethod
    def of_group(cls, group: str, job: str, args: list[str]) -> SparkJob:
        """``spark_jobs/group.py`` running ``job`` (dump | seal) for the tables of ``group``."""
        return cls("group", group, ["--job", job, *args], target="--group")

    @property
    def name(self) -> str:
        if self.target == "--group":
            return f"tidemark-group-{self.group_job}-{self.table}"
        return f"tidemark-{self.job}-{self.table}"

    @property
    def arguments(self) -> list[str]:
        return [self.target, self.table, *self.args]

    def application(self, settings: Settings) -> str:
        return str(settings.project_root / "spark_jobs" / f"{self.job}.py")

    def command(self, settings: Settings) -> list[str]:
        """The spark-submit command line (the CLI runs it with :func:`spark_environment`;
        Airflow's operator builds the same from the application, the arguments and its
        connection)."""

        command = [spark_submit(settings), "--master", settings.spark_master, "--name", self.name]
        launch = self.launch_conf(settings)
        drivers = joined_class_path(driver_class_path(settings), launch.pop(DRIVER_CLASS_PATH, ""))
        command += ["--driver-java-options", driver_java_options(settings, drivers)]
        if drivers:
            command += ["--driver-class-path", drivers]
        for key, value in {**launch, **settings.spark_conf}.items():
            command += ["--conf", f"{key}={value}"]
        return [*command, self.application(settings), *self.arguments]

    def launch_conf(self, settings: Settings) -> dict[str, str]:
        """The conf of the tables this job serves (``table_session_conf``) as spark-submit must
        get it: jars on the driver's class path count only at launch (a session built inside
        the job adds them for executors and SQL, not for the driver's class loader, JDBC's
        DriverManager or Py4J). A group's tables are its members now. Secrets (a catalog's
        credential) stay off the command line: the job's own session gets them in-process
        (``tables_session_conf``, its catalogs made ready by ``ready_catalogs``)."""
        if self.target == "--group":
            conf = tables_session_conf(group_members(self.table, settings), settings, job=self.group_job)
        else:
            conf = table_session_conf(load_table(self.table, settings), settings, job=self.job)
        secrets = secret_conf_keys(settings)
        return {k: v for k, v in conf.items() if k not in secrets}


# Jobs whose session starts on first use (``run_job(lazy=True)``): launched as a Python
# process, PySpark starting the same driver from PYSPARK_SUBMIT_ARGS if the job needs Spark.
LAZY_JOBS = frozenset({"seal", "dump"})
SUBMIT_ARGS_ENV = "PYSPARK_SUBMIT_ARGS"


def python_launch(command: Sequence[str], application: str, python: str) -> tuple[list[str], str] | None:
    """The spark-submit ``command`` of ``application`` as ``python application arguments`` and
    the PYSPARK_SUBMIT_ARGS with which PySpark's own spark-submit starts the very driver the
    command would have (its master, class path, JVM options and conf), only when the job asks
    for a session; None for a driver on the cluster (``--deploy-mode cluster``), which only
    spark-submit can place. A seal with nothing to ask Spark then starts no JVM at all (spark-
    submit itself costs ~2.5 CPU-s: a launcher JVM, then the driver's)."""
    at = list(command).index(application)
    options = list(command[1:at])
    if "--deploy-mode" in options and options[options.index("--deploy-mode") + 1 :][:1] == ["cluster"]:
        return None
    return [python, application, *command[at + 1 :]], shlex.join([*options, "pyspark-shell"])


def spark_submit(settings: Settings) -> str:
    """The venv's own spark-submit (beside its interpreter), whatever PATH holds."""

    beside = Path(settings.python).parent / "spark-submit"
    return str(beside) if beside.exists() else str(Path(spark_home()) / "bin" / "spark-submit")


def spark_home() -> str:
    """Spark's home inside the installed pyspark package (found without importing it)."""

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed in this interpreter's environment")
    return str(Path(spec.origin).parent)


SPARK_ENVIRONMENT = ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PATH")


def spark_environment(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a spark-submit of a tidemark job runs in: the venv's interpreter for the
    driver and the executors and the venv's Spark home, whatever PATH holds (called by its path
    from cron or systemd, spark-submit would find Spark's home with the ``python3`` on PATH,
    which has no pyspark)."""

    env = dict(os.environ if base is None else base)
    venv_bin = str(Path(settings.python).parent)
    path = env.get("PATH", "")
    env.update(
        {
            "SPARK_HOME": env.get("SPARK_HOME") or spark_home(),
            "PYSPARK_PYTHON": settings.python,
            "PYSPARK_DRIVER_PYTHON": settings.python,
            "PATH": path if path.split(os.pathsep)[:1] == [venv_bin] else f"{venv_bin}{os.pathsep}{path}",
        }
    )
    return env


def job_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--table", required=True, help="table name (conf/tables/<name>.yaml)")
    parser.add_argument("--run-id", required=True, help="Airflow run id: the job's idempotency key")
    parser.add_argument(
        "--dry-run",
        type=lambda text: text.strip().lower() in ("1", "true", "yes"),
        default=False,
        help="true: report what the job would do, change nothing (the trigger form's dry_run)",
    )
    return parser


# a job's exit status for an error a retry cannot change (``TidemarkError.retryable`` False):
# the task operator fails the task without its retries (sysexits' EX_CONFIG)
NO_RETRY_EXIT_CODE = 78


def run_job(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, body: Body, *, hive: bool, lazy: bool = False
) -> int:
    """Parse ``argv``, build the session (``lazy``: on first use), run ``body`` and print its
    result as JSON."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    try:
        settings = Settings.from_env()
        config = load_table(args.table, settings)
        table = Table.open(config, settings).checked(args.run_id, dry_run=args.dry_run)
        with table.held():  # the library's Table.open in this job: this handle, opened once
            return in_session(
                f"tidemark-{parser.prog}-{config.table}",
                settings,
                hive,
                lambda spark: body(spark, config, settings, args),
                extra_conf=tables_session_conf([config], settings, job=parser.prog),
                lazy=lazy,
            )
    except TidemarkError as exc:
        if exc.retryable:
            raise
        logging.getLogger(__name__).error("%s: %s", type(exc).__name__, exc)
        print(json.dumps({"error": type(exc).__name__, "message": str(exc), "retryable": False}))
        return NO_RETRY_EXIT_CODE


# jobs that write no table hour (they stage batches): an Iceberg table's runtime is not theirs
STAGING_JOBS = frozenset({"dump", "replay"})


def table_session_conf(config: TableConfig, settings: Settings, *, job: str = "") -> dict[str, str]:
    """The Spark conf a job of ``config`` needs beyond tidemark's defaults: delta-spark for a
    Delta snapshot (its MERGE with ``cdc.merge_engine: spark``, and the table registered in the
    metastore as a Delta table by every engine), Iceberg's runtime for ``cdc.snapshot_format:
    iceberg`` (with its SQL extensions) and for ``output.table_format: iceberg`` (the hour
    commits, ``hourcommit.iceberg_java``: not for ``job``s that only stage batches); for a snapshot Spark writes on S3, s3a on the
    executors' class path (the same paths must hold the jars on every worker: here the
    workers share the machine; elsewhere the Spark distribution's hadoop-aws)."""
    snapshot_format = config.cdc.snapshot_format if config.cdc is not None else None
    confs = []
    if job not in STAGING_JOBS:  # the hours' publication: Iceberg's catalog and runtime, say
        confs.append(publication_kind(config.output.table_format).spark_conf(settings))
    if snapshot_format == "delta":
        confs.append(delta_spark_conf())
    elif snapshot_format == "iceberg":
        confs.append(iceberg_writer_conf(settings))
    if snapshot_format in ("delta", "iceberg") and needs_s3a(settings.warehouse):
        # Spark's own writers read and write the snapshot's files on the executors: s3a there
        # too (tidemark's other tasks use pyarrow), from the same local jars as the driver's
        jars = [jdbc_driver_class_path(), *s3a_jars(settings)]
        confs.append({"spark.executor.extraClassPath": ":".join(j for j in jars if j)})
    return merged_conf(*confs)


def tables_session_conf(
    configs: Sequence[TableConfig], settings: Settings, *, job: str = ""
) -> dict[str, str]:
    """What one application serving ``configs`` (a group's tables) needs: each table's conf."""
    return merged_conf(*(table_session_conf(c, settings, job=job) for c in configs))


def ready_catalogs(conf: Mapping[str, str], settings: Settings) -> None:
    """The Iceberg SQL catalog's database and namespace made, where ``conf`` names the catalog
    (Iceberg's JDBC catalog in the JVM does not create the namespace): just before a session
    starts, so a lazy job that never starts one never opens the catalog (~0.6 s of imports)."""
    if any(c.startswith(f"spark.sql.catalog.{settings.iceberg_catalog}") for c in conf):
        open_catalog(settings)


DRIVER_CLASS_PATH = "spark.driver.extraClassPath"
# confs whose values are lists: two confs that both set one are joined, not overridden
LIST_CONFS = {
    "spark.jars": ",",
    "spark.sql.extensions": ",",
    DRIVER_CLASS_PATH: ":",
    "spark.executor.extraClassPath": ":",
}


def joined_class_path(*paths: str | None) -> str:
    """Class paths as one, each entry once, in order."""
    entries = [e for p in paths if p for e in p.split(":") if e]
    return ":".join(dict.fromkeys(entries))


def merged_conf(*confs: Mapping[str, str]) -> dict[str, str]:
    """``confs`` as one: list-valued confs joined (each item once, in order), others the last's."""
    merged: dict[str, str] = {}
    for conf in confs:
        for key, value in conf.items():
            if key in merged and key in LIST_CONFS:
                separator = LIST_CONFS[key]
                items = [*merged[key].split(separator), *value.split(separator)]
                merged[key] = separator.join(dict.fromkeys(i for i in items if i))
            else:
                merged[key] = value
    return merged


def reader_conf(settings: Settings) -> dict[str, str]:
    """A session that reads every table tidemark writes by name: Hive tables, Delta snapshots
    (delta-spark, ``DeltaCatalog`` as the session catalog) and Iceberg tables
    (``iceberg.default.<table>``, with Iceberg's SQL extensions). The catalog is the writers'
    to create (``open_catalog``): a reader only names it."""
    return merged_conf(delta_spark_conf(), iceberg_writer_conf(settings))


def sql_client_conf(settings: Settings) -> dict[str, str]:
    """What a Spark SQL client of one's own (``spark-sql``, ``pyspark``, a notebook) needs to
    read every table tidemark writes by name, as ``tidemark spark-conf`` prints it: the
    metastore, s3a for a warehouse on S3, the UTC session zone tidemark writes in, and
    :func:`reader_conf`."""
    conf = {"spark.sql.catalogImplementation": "hive", "spark.sql.session.timeZone": "UTC"}
    conf.update(metastore_conf(settings))
    if needs_s3a(settings.warehouse):
        conf.update(s3a_conf(settings))
    return merged_conf(conf, reader_conf(settings))


def in_session(
    name: str,
    settings: Settings,
    hive: bool,
    body: Callable[[SparkSession], Any],
    *,
    extra_conf: dict[str, str] | None = None,
    lazy: bool = False,
) -> int:
    """Build the session (``extra_conf``: what the table's jobs need beyond the defaults; ``lazy``:
    on first use, :class:`LazySession`), run ``body`` (the session always stopped) and print its
    result as one JSON line with the session's start seconds (0 where it never started)."""

    def build() -> SparkSession:
        ready_catalogs(extra_conf or {}, settings)
        return build_session(name, settings, hive=hive, extra_conf=extra_conf)

    planned = {
        "spark.master": settings.spark_master,
        **planned_session_conf(settings, hive=hive, extra_conf=extra_conf),
    }
    spark = LazySession(name, build, planned)
    try:
        with spark.for_this_process():
            # a LazySession stands for the SparkSession it builds: whatever it is asked, it asks that
            result = body(cast("SparkSession", spark) if lazy else spark.session(eager=True))
    finally:
        spark.stop()
    payload = result if isinstance(result, dict) else result.to_json()
    started = {"session_start_s": round(spark.start_seconds, 3), "spark_started": spark.started}
    print(json.dumps({**payload, **started}))
    return 0


def submit_job(table: str, job: str, job_args: list[str]) -> int:
    """spark-submit ``spark_jobs/<job>.py`` for ``table`` with the configured master (what the
    DAGs run), from the CLI; its exit status."""
    settings = Settings.from_env()
    load_table(table, settings)  # fail fast on a bad config, before a JVM starts
    spark_job = SparkJob(job, table, job_args)
    command, env = spark_job.command(settings), spark_environment(settings)
    launch = (
        python_launch(command, spark_job.application(settings), settings.python) if job in LAZY_JOBS else None
    )
    if launch is not None:
        command, env[SUBMIT_ARGS_ENV] = launch
    logging.getLogger(__name__).info("running %s", " ".join(command))
    return subprocess.call(command, env=env)
