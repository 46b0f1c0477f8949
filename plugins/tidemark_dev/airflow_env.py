"""The environment of a local Airflow 3 (standalone, tests): one definition for `make up`,
`dag.test()` fixtures and end-to-end tests, so they all see the same dags, plugins, pools and
connections."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tidemark.settings import Settings

HIVE_METASTORE_POOL = "hive_metastore"


def metastore_pool(settings: Settings) -> tuple[int, str]:
    """Slots and description of the pool of metastore tasks: embedded Derby admits one
    process; a metastore service (``TIDEMARK_HIVE_METASTORE_URIS``) many."""
    if settings.hive_metastore_uris:
        return 16, "Hive metastore service: concurrent seal, rebuild and merge tasks"
    return 1, "Embedded Derby admits one process: serialises Hive metastore tasks"


def airflow_environment(settings: Settings, *, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment variables for every Airflow process of the local stack.

    SQLite + LocalExecutor with low parallelism (2 cores), the project's dags/ and plugins/,
    the API server on 127.0.0.1 only, and a ``spark_default`` connection to the configured
    Spark master.
    """
    env = dict(os.environ if base is None else base)
    root = settings.project_root
    venv_bin = str(Path(settings.python).parent)
    port = settings.airflow_port
    env.update(
        {
            "AIRFLOW_HOME": str(settings.airflow_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            # users of the login (SimpleAuthManager): yours if set, else one admin
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": env.get(
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin"
            ),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": settings.spark_master}),
            "TIDEMARK_HOME": str(settings.home),
            "TIDEMARK_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "TIDEMARK_CONF_DIR": str(settings.conf_dir),
            "PYSPARK_PYTHON": settings.python,
            "PATH": venv_bin + os.pathsep + env.get("PATH", ""),
        }
    )
    return env


def admin_password(settings: Settings) -> str | None:
    """The admin password SimpleAuthManager generated (it prints it once)."""
    path = settings.airflow_home / "simple_auth_manager_passwords.json.generated"
    try:
        return str(json.loads(path.read_text())["admin"])
    except (OSError, ValueError, KeyError):
        return None
