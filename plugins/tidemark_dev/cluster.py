"""A Spark standalone cluster on this machine: one master and two workers, each worker with
its own work and local directories, from the pyspark wheel's ``spark-class``.

The workers run with an environment scrubbed of this checkout's venv (no ``PYSPARK_PYTHON``,
``VIRTUAL_ENV``, ``PYTHONPATH`` or venv ``bin`` on ``PATH``), so executors find tidemark and
its dependencies only the way real nodes would: the library zip the driver ships, and the
venv archive of ``TIDEMARK_EXECUTOR_ENV`` (``make executor-env``) that ``./tidemark-python``
unpacks once per node (``tidemark.executor_env``). Ports: ``TIDEMARK_SPARK_PORT`` (master) and the next five (UIs and workers).
"""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from pathlib import Path

from tidemark.jobs import spark_home
from tidemark.settings import Settings
from tidemark_dev.services import Service

WORKERS = 2


def _spark_class() -> str:
    return str(Path(spark_home()) / "bin" / "spark-class")


def node_environment(settings: Settings) -> dict[str, str]:
    """What a Spark daemon of a real node would have: Spark and Java, not this venv."""

    venv_bin = str(Path(settings.python).parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["SPARK_HOME"] = spark_home()
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def master_url(settings: Settings) -> str:
    return f"spark://127.0.0.1:{settings.spark_port}"


class SparkMasterService(Service):
    name = "spark-master"
    start_timeout = 60.0

    def address(self) -> str:
        return master_url(self.settings)

    def environment(self) -> dict[str, str]:
        return node_environment(self.settings)

    def command(self) -> list[str]:
        p = self.settings.spark_port
        return [
            _spark_class(),
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(p),
            "--webui-port",
            str(p + 1),
        ]

    def answers(self) -> bool:
        return bool(self.state())

    def state(self) -> dict[str, object]:
        """The master's JSON status (its workers), empty when it does not answer."""
        try:
            socket.create_connection(("127.0.0.1", self.settings.spark_port), timeout=2).close()
            url = f"http://127.0.0.1:{self.settings.spark_port + 1}/json/"
            with urllib.request.urlopen(url, timeout=3) as response:
                return dict(json.loads(response.read()))
        except (OSError, ValueError):
            return {}


class SparkWorkerService(Service):
    """Worker ``index`` (1 or 2): one core, its own work and local directories."""

    start_timeout = 60.0

    def __init__(self, settings: Settings, index: int) -> None:
        self.index = index
        self.name = f"spark-worker-{index}"
        super().__init__(settings)

    @property
    def port(self) -> int:
        return self.settings.spark_port + 2 * self.index

    @property
    def node_dir(self) -> Path:
        return self.settings.home / self.name

    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        env = node_environment(self.settings)
        env["SPARK_LOCAL_DIRS"] = str(self.node_dir / "local")
        return env

    def command(self) -> list[str]:
        return [
            _spark_class(),
            "org.apache.spark.deploy.worker.Worker",
            master_url(self.settings),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.port + 1),
            "--cores",
            "1",
            "--memory",
            "2g",
            "--work-dir",
            str(self.node_dir / "work"),
        ]

    def prepare(self) -> None:
        for sub in ("work", "local"):
            (self.node_dir / sub).mkdir(parents=True, exist_ok=True)

    def answers(self) -> bool:
        """Registered with the master and alive."""
        workers = SparkMasterService(self.settings).state().get("workers", [])
        return isinstance(workers, list) and any(
            isinstance(w, dict) and w.get("port") == self.port and w.get("state") == "ALIVE" for w in workers
        )
