"""Deployment settings: where state lives, which broker and Spark master to use.

Everything deployment-specific comes from the environment, so one checkout runs on a laptop
(embedded defaults), in CI and against a real cluster. Table semantics live in the table YAML.

| variable | default |
|---|---|
| ``TIDEMARK_HOME`` | ``<checkout>/.tidemark`` (git-ignored): state, warehouse, metastore, logs |
| ``TIDEMARK_CONF_DIR`` | ``<checkout>/conf/tables`` |
| ``TIDEMARK_KAFKA_BOOTSTRAP`` | ``127.0.0.1:19092`` (the local tansu broker) |
| ``TIDEMARK_SPARK_MASTER`` | ``local[2]`` |
| ``TIDEMARK_SPARK_CONF`` | ``{}``: a JSON object of extra Spark conf, e.g. a Postgres metastore |
| ``TIDEMARK_WAREHOUSE`` | ``$TIDEMARK_HOME/warehouse``: a path, or ``s3://bucket/prefix`` |
| ``TIDEMARK_EXECUTOR_ENV`` | unset: a ``.tar.gz`` of a venv shipped to executors of a non-local master (``make executor-env``) |
| ``TIDEMARK_EXECUTOR_ENV_CACHE`` | unset: where worker nodes keep it unpacked (``tidemark.executor_env``) |
| ``TIDEMARK_SPARK_PORT`` | ``7077``: the local standalone cluster (``services start spark-master``; 5 more ports) |
| ``TIDEMARK_HIVE_METASTORE_URIS`` | unset: the home's ``derby-metastore`` service while it runs (``make up`` starts it), else its embedded Derby database under ``$TIDEMARK_HOME/metastore_db``; set and empty: embedded Derby |
| ``TIDEMARK_METASTORE_CLIENT`` | ``thrift``: a seal registers over the service's plain Thrift API; ``hive``: through Spark's Hive client (a Kerberos or TLS metastore) |
| ``TIDEMARK_AIRFLOW_PORT`` | ``8080`` |
| ``TIDEMARK_POSTGRES_PORT`` | ``15432``: the local PostgreSQL of the demo and the JDBC tests |
| ``TIDEMARK_S3_PORT`` | ``8333``: the local S3 server (``services start s3``; it uses the next 9 ports too) |
| ``TIDEMARK_METASTORE_PORT`` | ``9083``: the local Hive metastore service (``services start derby-metastore``, or ``metastore`` on PostgreSQL) |
| ``TIDEMARK_ICEBERG_CATALOG_URI`` | unset: a SQLite Iceberg catalog in the home; ``postgresql+pg8000://...``; ``http(s)://...``: an Iceberg REST catalog |
| ``TIDEMARK_ICEBERG_CATALOG_CREDENTIAL`` / ``_TOKEN`` | unset: a REST catalog's OAuth2 client credentials (``id:secret``) or bearer token |
| ``TIDEMARK_ICEBERG_CATALOG_PROPERTIES`` | ``{}``: a JSON object of more catalog properties (``warehouse``, ``prefix``, ``scope``, ``oauth2-server-uri``, ``header.<name>``) |
| ``TIDEMARK_ICEBERG_CATALOG_TIMEOUT_S`` | ``60``: how long one call to a REST catalog may take |
| ``TIDEMARK_ICEBERG_REST_PORT`` | ``8181``: the local Iceberg REST catalog (``services start iceberg-rest``) |
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidemark.errors import ConfigError
from tidemark.state.storage import Location
from tidemark.tablefs import needs_s3a

# plugins/tidemark/settings.py -> the checkout root (editable install keeps the source path).
_CHECKOUT = Path(__file__).resolve().parents[2]
DEFAULT_BOOTSTRAP = "127.0.0.1:19092"
EXECUTOR_PYTHON = "./tidemark-python"  # executors' launcher of TIDEMARK_EXECUTOR_ENV (executor_env.py)


def project_root() -> Path:
    """The checkout holding dags/, spark_jobs/ and conf/ (``TIDEMARK_PROJECT_ROOT`` overrides)."""
    return Path(os.environ.get("TIDEMARK_PROJECT_ROOT", _CHECKOUT)).resolve()


def _port(env: Mapping[str, str], name: str, default: int, problems: list[str], *, block: int = 1) -> int:
    """A TCP port from ``env`` (with room for ``block`` consecutive ports); a bad value is
    added to ``problems`` and the default returned."""
    text = env.get(name, str(default))
    if not text.isdigit() or not 0 < int(text) <= 65536 - block:
        problems.append(f"{name}: expected a TCP port number, got {text!r}")
        return default
    return int(text)


def _json_object(env: Mapping[str, str], name: str, example: str, problems: list[str]) -> dict[str, str]:
    """A JSON object of strings from ``env``; a bad value is added to ``problems``."""
    raw = env.get(name, "").strip()
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
        if not isinstance(parsed, dict):
            raise ValueError("not an object")
    except ValueError:
        problems.append(f"{name}: expected a JSON object such as {example}, got text that is not one")
        return {}
    return {str(k): str(v) for k, v in parsed.items()}


def _seconds(env: Mapping[str, str], name: str, default: float, problems: list[str]) -> float:
    """A positive number of seconds from ``env``; a bad value is added to ``problems``."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
        if value <= 0:
            raise ValueError
    except ValueError:
        problems.append(f"{name}: expected a number of seconds > 0, got {raw!r}")
        return default
    return value


# The local deployment's metastore service over the home's own Derby database (tidemark-dev's
# ``derby-metastore``, which ``make up`` starts): its pid file in the home's run directory.
DERBY_METASTORE_SERVICE = "derby-metastore"


def local_metastore_service(home: Path) -> str:
    """The URI of the home's ``derby-metastore`` service while it runs, else "" (the jobs then
    open its Derby database themselves): every process of the home, Airflow's, a shell's CLI
    and the jobs, finds the one metastore without a variable to keep in step."""
    try:
        record = json.loads((home / "run" / f"{DERBY_METASTORE_SERVICE}.pid").read_text())
        os.kill(int(record["pid"]), 0)
        return str(record["uri"])
    except (OSError, ValueError, KeyError, TypeError):  # PermissionError: another user's process
        return ""


@dataclass(frozen=True)
class Settings:
    """Resolved deployment settings; build with :meth:`from_env`."""

    home: Path
    conf_dir: Path
    kafka_bootstrap: str
    spark_master: str
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    warehouse: str = ""
    hive_metastore_uris: str = ""
    # how a seal registers partitions with a metastore service (TIDEMARK_METASTORE_CLIENT):
    # "thrift" (its Thrift API directly) or "hive" (Spark's Hive client)
    metastore_client: str = "thrift"
    # seconds a Thrift call to the metastore service may wait for its answer before the seal
    # reconnects once and then fails by name (TIDEMARK_METASTORE_TIMEOUT_S): a service that
    # accepts and never answers must not hold a seal and the table's lock until Airflow's timeout
    metastore_timeout_s: float = 60.0
    airflow_port: int = 8080
    postgres_port: int = 15432
    metastore_port: int = 9083
    s3_port: int = 8333
    spark_port: int = 7077
    python: str = sys.executable
    # a venv archive executors of a non-local master unpack and run (TIDEMARK_EXECUTOR_ENV)
    executor_env: str = ""
    # where on each node executors keep it unpacked (TIDEMARK_EXECUTOR_ENV_CACHE; empty: the
    # node's ${XDG_CACHE_HOME:-$HOME/.cache}/tidemark-executor-env)
    executor_env_cache: str = ""
    # commit logs, journals and locks; a path or an hdfs:// URI (TIDEMARK_STATE_DIR)
    state_uri: str = ""
    # more JVM options for the driver and executors of the jobs' sessions (TIDEMARK_JVM_OPTIONS)
    jvm_options: str = ""
    # the drivers' class-data-sharing archive (TIDEMARK_JVM_CLASS_ARCHIVE; "off": none; empty:
    # <venv>/share/tidemark/spark-classes.jsa, written by `make spark-classes`)
    jvm_class_archive: str = ""
    # the Iceberg catalog of tables with output.table_format: iceberg (TIDEMARK_ICEBERG_CATALOG_URI,
    # an SQLAlchemy URL: sqlite:///<file> or postgresql+pg8000://...; empty: a SQLite file in the
    # home; an http(s):// URL: an Iceberg REST catalog) and its name, which Spark's catalog takes too (TIDEMARK_ICEBERG_CATALOG)
    iceberg_catalog_uri: str = ""
    iceberg_catalog: str = "iceberg"
    # a REST catalog's secrets (TIDEMARK_ICEBERG_CATALOG_CREDENTIAL: OAuth2 "client_id:secret";
    # TIDEMARK_ICEBERG_CATALOG_TOKEN: a bearer token), more of its properties as Iceberg's
    # clients take them (TIDEMARK_ICEBERG_CATALOG_PROPERTIES) and how long one call may take
    iceberg_catalog_credential: str = field(default="", repr=False)
    iceberg_catalog_token: str = field(default="", repr=False)
    iceberg_catalog_properties: Mapping[str, str] = field(default_factory=dict)
    iceberg_catalog_timeout_s: float = 60.0
    iceberg_rest_port: int = 8181

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read ``TIDEMARK_*`` variables; a malformed value raises ConfigError naming it."""
        env = os.environ if env is None else env
        root = Path(env.get("TIDEMARK_PROJECT_ROOT", str(project_root())))
        home = Path(env.get("TIDEMARK_HOME", str(root / ".tidemark"))).expanduser().resolve()
        problems: list[str] = []
        spark_conf = _json_object(env, "TIDEMARK_SPARK_CONF", '{"spark.executor.memory": "2g"}', problems)
        catalog_properties = _json_object(
            env, "TIDEMARK_ICEBERG_CATALOG_PROPERTIES", '{"warehouse": "lake", "scope": "catalog"}', problems
        )
        airflow_port = _port(env, "TIDEMARK_AIRFLOW_PORT", 8080, problems)
        postgres_port = _port(env, "TIDEMARK_POSTGRES_PORT", 15432, problems)
        metastore_port = _port(env, "TIDEMARK_METASTORE_PORT", 9083, problems)
        s3_port = _port(env, "TIDEMARK_S3_PORT", 8333, problems, block=10)  # the S3 server's ten
        spark_port = _port(env, "TIDEMARK_SPARK_PORT", 7077, problems, block=6)  # master + 2 workers, UIs
        bootstrap = env.get("TIDEMARK_KAFKA_BOOTSTRAP", DEFAULT_BOOTSTRAP).strip()
        if not bootstrap:
            problems.append("TIDEMARK_KAFKA_BOOTSTRAP: expected host:port[,host:port...], got an empty value")
        metastore_client = env.get("TIDEMARK_METASTORE_CLIENT", "thrift").strip() or "thrift"
        if metastore_client not in ("thrift", "hive"):
            problems.append(f"TIDEMARK_METASTORE_CLIENT: expected thrift or hive, got {metastore_client!r}")
        metastore_timeout_s = _seconds(env, "TIDEMARK_METASTORE_TIMEOUT_S", 60.0, problems)
        catalog_timeout_s = _seconds(env, "TIDEMARK_ICEBERG_CATALOG_TIMEOUT_S", 60.0, problems)
        iceberg_rest_port = _port(env, "TIDEMARK_ICEBERG_REST_PORT", 8181, problems)
        if problems:
            raise ConfigError("environment", problems)
        return cls(
            home=home,
            conf_dir=Path(env.get("TIDEMARK_CONF_DIR", str(root / "conf" / "tables"))).resolve(),
            kafka_bootstrap=bootstrap,
            spark_master=env.get("TIDEMARK_SPARK_MASTER", "local[2]"),
            spark_conf=spark_conf,
            warehouse=env.get("TIDEMARK_WAREHOUSE", str(home / "warehouse")),
            hive_metastore_uris=(
                env["TIDEMARK_HIVE_METASTORE_URIS"]
                if "TIDEMARK_HIVE_METASTORE_URIS" in env
                else local_metastore_service(home)
            ),
            metastore_client=metastore_client,
            metastore_timeout_s=metastore_timeout_s,
            airflow_port=airflow_port,
            postgres_port=postgres_port,
            metastore_port=metastore_port,
            s3_port=s3_port,
            spark_port=spark_port,
            python=env.get("PYSPARK_PYTHON", sys.executable),
            executor_env=env.get("TIDEMARK_EXECUTOR_ENV", ""),
            executor_env_cache=env.get("TIDEMARK_EXECUTOR_ENV_CACHE", ""),
            state_uri=env.get("TIDEMARK_STATE_DIR", ""),
            jvm_options=env.get("TIDEMARK_JVM_OPTIONS", "").strip(),
            jvm_class_archive=env.get("TIDEMARK_JVM_CLASS_ARCHIVE", "").strip(),
            iceberg_catalog_uri=env.get("TIDEMARK_ICEBERG_CATALOG_URI", "").strip(),
            iceberg_catalog=env.get("TIDEMARK_ICEBERG_CATALOG", "").strip() or "iceberg",
            iceberg_catalog_credential=env.get("TIDEMARK_ICEBERG_CATALOG_CREDENTIAL", "").strip(),
            iceberg_catalog_token=env.get("TIDEMARK_ICEBERG_CATALOG_TOKEN", "").strip(),
            iceberg_catalog_properties=catalog_properties,
            iceberg_catalog_timeout_s=catalog_timeout_s,
            iceberg_rest_port=iceberg_rest_port,
        )

    @property
    def executor_python(self) -> str:
        """The interpreter executors run: the shipped venv's on a non-local master with
        ``TIDEMARK_EXECUTOR_ENV``, else this one (local mode, or nodes that have it)."""
        if self.executor_env and not self.spark_master.startswith("local"):
            return EXECUTOR_PYTHON
        return self.python

    @property
    def project_root(self) -> Path:
        return project_root()

    @property
    def class_archive(self) -> Path | None:
        """Where the drivers' class-data-sharing archive lives, or None when turned off: one
        per driver class path (a warehouse on an object store adds the s3a jars, which a JVM
        would not map from the other's archive: ``-s3a`` beside it)."""
        if self.jvm_class_archive == "off":
            return None
        base = (
            Path(self.jvm_class_archive)
            if self.jvm_class_archive
            else Path(self.python).parent.parent / "share" / "tidemark" / "spark-classes.jsa"
        )

        return base.with_name(f"{base.stem}-s3a{base.suffix}") if needs_s3a(self.warehouse) else base

    @property
    def iceberg_catalog_url(self) -> str:
        """The Iceberg catalog's URL: a SQL catalog's SQLAlchemy URL (a SQLite file in the home
        by default) or a REST catalog's ``http(s)://`` base."""
        return self.iceberg_catalog_uri or f"sqlite:///{self.home / 'iceberg' / 'catalog.db'}"

    def iceberg_environment(self) -> dict[str, str]:
        """The ``TIDEMARK_ICEBERG_*`` variables a process reads this Iceberg catalog back from
        (a job or a reader started by this one)."""
        return {
            "TIDEMARK_ICEBERG_CATALOG_URI": self.iceberg_catalog_uri,
            "TIDEMARK_ICEBERG_CATALOG": self.iceberg_catalog,
            "TIDEMARK_ICEBERG_CATALOG_CREDENTIAL": self.iceberg_catalog_credential,
            "TIDEMARK_ICEBERG_CATALOG_TOKEN": self.iceberg_catalog_token,
            "TIDEMARK_ICEBERG_CATALOG_PROPERTIES": json.dumps(dict(self.iceberg_catalog_properties)),
            "TIDEMARK_ICEBERG_CATALOG_TIMEOUT_S": str(self.iceberg_catalog_timeout_s),
        }

    @property
    def state_dir(self) -> Path:
        """Commit logs and partition state, per table, when they are on local disk."""
        location = self.state_location
        if location.scheme not in ("", "file"):
            raise ConfigError("environment", [f"TIDEMARK_STATE_DIR: {location} is not a local path"])
        return location.local_path()

    @property
    def state_location(self) -> Location:
        """Commit logs and partition state, per table: local or on the Hadoop FileSystem API."""
        return Location(self.state_uri or self.home / "state")

    @property
    def run_dir(self) -> Path:
        """Pid files of local services."""
        return self.home / "run"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def metastore_dir(self) -> Path:
        """Embedded Derby metastore database (one process at a time)."""
        return self.home / "metastore_db"

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    @property
    def broker_port(self) -> int:
        """Port of the local broker: the first bootstrap server's port."""
        first = self.kafka_bootstrap.split(",")[0]
        _, _, port = first.rpartition(":")
        return int(port) if port.isdigit() else 9092
