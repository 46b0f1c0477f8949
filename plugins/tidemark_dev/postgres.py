"""A PostgreSQL cluster of tidemark's own for the demo and the tests (the JDBC source of the
orders bootstrap, and the database of the Hive metastore service), managed like the other
local services."""

from __future__ import annotations

import glob
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

from tidemark.errors import ServiceError
from tidemark.jobs import spark_home
from tidemark.settings import Settings
from tidemark.spark import s3a_jars
from tidemark.tablefs import hadoop_uri, is_object_store
from tidemark_dev.s3 import hadoop_s3a_site
from tidemark_dev.services import Service, java_binary

log = logging.getLogger(__name__)


POSTGRES_USER = "tidemark"
# A throwaway local cluster with a published password, never a real database's credentials.
POSTGRES_PASSWORD = "tidemark"
POSTGRES_JDBC_JAR = "/usr/share/java/postgresql.jar"  # Debian's libpostgresql-jdbc-java


def postgres_url(settings: Settings, database: str = "postgres") -> str:
    """JDBC URL of the local cluster (credentials travel separately)."""
    return f"jdbc:postgresql://127.0.0.1:{settings.postgres_port}/{database}"


class PostgresService(Service):
    """A PostgreSQL cluster of tidemark's own on ``TIDEMARK_POSTGRES_PORT`` (Debian's server
    binaries, scripts/ensure_postgres.sh). PostgreSQL refuses to run as root, so under root the
    cluster runs as the ``postgres`` user in a directory that user can reach."""

    name = "postgres"
    stop_signal = signal.SIGINT  # "fast" shutdown
    start_timeout = 60.0

    def address(self) -> str:
        return f"127.0.0.1:{self.settings.postgres_port}"

    @property
    def as_root(self) -> bool:
        return os.geteuid() == 0

    @property
    def data_dir(self) -> Path:
        if self.as_root:  # TIDEMARK_HOME may sit under a 0700 directory of root's
            return Path(tempfile.gettempdir()) / f"tidemark-postgres-{self.settings.postgres_port}"
        return self.settings.home / "postgres"

    def _bin(self, program: str) -> str:
        found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{program}"))
        if not found:
            raise ServiceError(
                "postgres: no PostgreSQL server binaries under /usr/lib/postgresql; "
                "run scripts/ensure_postgres.sh (or apt-get install postgresql)"
            )
        return found[-1]

    def _as_owner(self, command: list[str]) -> list[str]:
        # setpriv execs in place (runuser would stay the parent and swallow SIGINT).
        owner = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
        return [*owner, *command] if self.as_root else command

    def command(self) -> list[str]:
        return self._as_owner(
            [
                self._bin("postgres"),
                "-D",
                str(self.data_dir),
                "-p",
                str(self.settings.postgres_port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.data_dir}",
                "-c",
                "fsync=off",
            ]
        )

    def answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.settings.postgres_port), timeout=2).close()
        except OSError:
            return False
        probe = subprocess.run(
            [self._bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.settings.postgres_port)],
            capture_output=True,
            check=False,
        )
        return probe.returncode == 0

    def prepare(self) -> None:
        """initdb once: user ``tidemark`` with a password over TCP (scram), trust on the socket."""
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        pwfile = self.data_dir.parent / f".{self.data_dir.name}.pw"
        pwfile.write_text(POSTGRES_PASSWORD + "\n")
        if self.as_root:
            shutil.chown(self.data_dir, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
        initdb = [
            self._bin("initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            POSTGRES_USER,
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "--encoding=UTF8",
        ]
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            result = subprocess.run(self._as_owner(initdb), stdout=out, stderr=subprocess.STDOUT, check=False)
        pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise ServiceError(f"postgres: initdb of {self.data_dir} failed; see {self.log_file}")
        log.info("postgres: new cluster in %s (user %s)", self.data_dir, POSTGRES_USER)


METASTORE_DATABASE = "hive_metastore"


def metastore_database(settings: Settings) -> str:
    """The metastore service's database in the PostgreSQL cluster: one for local warehouses and
    one for S3 ones. The service makes its ``default`` database at its first start, located in
    its warehouse, and Spark registers a Delta (non-Hive) table through a placeholder directory
    under that location: a job of a local warehouse has no s3a to reach an S3 one's."""
    return f"{METASTORE_DATABASE}_s3" if is_object_store(settings.warehouse) else METASTORE_DATABASE


HIVE_SITE = """<?xml version="1.0"?>
<!-- written by tidemark-dev services start metastore: a Hive 2.3 Thrift metastore on tidemark's own
     PostgreSQL (a throwaway local cluster: its published password, never a real one's) -->
<configuration>
{properties}
</configuration>
"""


class MetastoreService(Service):
    """The Hive 2.3.10 Thrift metastore that the pyspark wheel's jars hold, run standalone on
    ``TIDEMARK_METASTORE_PORT`` over the local PostgreSQL cluster (started first: ``services start
    postgres metastore``). Unlike embedded Derby, any number of jobs use it at once: point them
    at it with ``TIDEMARK_HIVE_METASTORE_URIS=thrift://127.0.0.1:<port>``."""

    name = "metastore"
    start_timeout = 120.0

    def address(self) -> str:
        return f"thrift://127.0.0.1:{self.settings.metastore_port}"

    @property
    def conf_dir(self) -> Path:
        return self.settings.home / "metastore-service" / "conf"

    def hive_site(self) -> dict[str, str]:
        return {
            "javax.jdo.option.ConnectionURL": postgres_url(self.settings, metastore_database(self.settings)),
            "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
            "javax.jdo.option.ConnectionUserName": POSTGRES_USER,
            "javax.jdo.option.ConnectionPassword": POSTGRES_PASSWORD,
            # The schema is made whole before the first start (``_create_schema``); left to
            # DataNucleus's lazy creation, the first create_table hangs for good: it adds a
            # foreign key to TBLS from one connection while another holds a transaction on it.
            "datanucleus.schema.autoCreateAll": "false",
            "hive.metastore.schema.verification": "false",
            # Without it the service dies on a NoClassDefFoundError for lmax disruptor.
            "hive.async.log.enabled": "false",
            "hive.metastore.warehouse.dir": hadoop_uri(self.settings.warehouse),
            # an S3 warehouse: the metastore checks every location it registers through s3a
            **hadoop_s3a_site(self.settings),
        }

    def _java(self) -> tuple[str, str]:
        """The java binary and the class path: conf first, the wheel's jars, the JDBC driver."""

        java = java_binary("metastore")

        extra = s3a_jars(self.settings) if is_object_store(self.settings.warehouse) else []
        return java, ":".join([str(self.conf_dir), f"{spark_home()}/jars/*", POSTGRES_JDBC_JAR, *extra])

    def jvm_properties(self) -> list[str]:
        """The service JVM's system properties beyond its log's."""
        return []

    def write_hive_site(self, template: str) -> None:
        """``hive_site`` as the conf directory's hive-site.xml (``template``: its header)."""
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        properties = "\n".join(
            f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>"
            for k, v in self.hive_site().items()
        )
        (self.conf_dir / "hive-site.xml").write_text(template.format(properties=properties))

    def command(self) -> list[str]:
        java, class_path = self._java()
        return [
            java,
            "-Xmx512m",
            *self.jvm_properties(),
            f"-Dhive.log.dir={self.settings.log_dir}",
            "-Dhive.log.file=metastore-hive.log",
            "-cp",
            class_path,
            "org.apache.hadoop.hive.metastore.HiveMetaStore",
            "-p",
            str(self.settings.metastore_port),
        ]

    def answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.settings.metastore_port), timeout=2).close()
        except OSError:
            return False
        return True

    def prepare(self) -> None:
        """The metastore database in the running PostgreSQL cluster, and hive-site.xml."""
        postgres = PostgresService(self.settings)
        if not postgres.status().answering:
            raise ServiceError(
                f"metastore: PostgreSQL does not answer on {postgres.address()}; start it first "
                "(tidemark-dev services start postgres metastore)"
            )
        if not Path(POSTGRES_JDBC_JAR).is_file():
            raise ServiceError(
                f"metastore: no JDBC driver at {POSTGRES_JDBC_JAR}; run scripts/ensure_postgres.sh"
            )
        created = self._database_tool(postgres, "createdb")
        if created.returncode != 0 and "already exists" not in created.stderr:
            raise ServiceError(
                f"metastore: createdb {metastore_database(self.settings)} failed: {created.stderr.strip()}"
            )
        self.write_hive_site(HIVE_SITE)
        if created.returncode == 0:  # a new database: its schema, whole, before the first start
            try:
                self._create_schema()
            except ServiceError:
                self._database_tool(postgres, "dropdb")
                raise

    def _database_tool(self, postgres: PostgresService, program: str) -> subprocess.CompletedProcess[str]:
        """``createdb`` or ``dropdb`` of the metastore database, over TCP as tidemark's user."""
        return subprocess.run(
            [
                postgres._bin(program),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.settings.postgres_port),
                "-U",
                POSTGRES_USER,
                metastore_database(self.settings),
            ],
            env={**os.environ, "PGPASSWORD": POSTGRES_PASSWORD},
            capture_output=True,
            text=True,
            check=False,
        )

    def _create_schema(self) -> None:
        """Every metastore table at once, with DataNucleus's SchemaTool over the JDO mapping in
        the hive-metastore jar (Hive's own schematool and its SQL scripts are not in the wheel)."""

        jars = Path(spark_home()) / "jars"
        metastore_jar = next(iter(sorted(jars.glob("hive-metastore-*.jar"))), None)
        if metastore_jar is None:
            raise ServiceError(f"metastore: no hive-metastore jar in {jars}")
        with zipfile.ZipFile(metastore_jar) as jar:
            (self.conf_dir / "package.jdo").write_bytes(jar.read("package.jdo"))
        site = self.hive_site()
        props = {k: v for k, v in site.items() if k.startswith("javax.jdo.option.")}
        # Hive's identifier rules, so the tables get the names the metastore looks up
        props.update(
            {
                "datanucleus.identifierFactory": "datanucleus1",
                "datanucleus.rdbms.useLegacyNativeValueStrategy": "true",
            }
        )
        (self.conf_dir / "schema.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        java, class_path = self._java()
        with open(self.log_file, "ab") as out:
            done = subprocess.run(
                [
                    java,
                    "-cp",
                    class_path,
                    "org.datanucleus.store.schema.SchemaTool",
                    "-create",
                    "-api",
                    "JDO",
                    "-props",
                    "schema.properties",
                    "package.jdo",
                ],
                cwd=self.conf_dir,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=300,
                check=False,
            )
        if done.returncode != 0:
            raise ServiceError(f"metastore: creating the schema failed; see {self.log_file}")
        log.info("metastore: schema created in database %s", metastore_database(self.settings))
