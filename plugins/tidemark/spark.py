"""The one Spark session factory every job uses.

Defaults give a local session with Hive support on an embedded Derby metastore under
``$TIDEMARK_HOME``; ``TIDEMARK_SPARK_MASTER`` / ``TIDEMARK_SPARK_CONF`` point the same jobs at a
standalone cluster, YARN or a Postgres/Thrift metastore. Executors run the venv's Python so they
import pyarrow, confluent-kafka and tidemark itself; on a non-local master the library is also
shipped as a zip so remote executors import the same code.
"""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.executor_env import CACHE_ENV, driver_launcher, shipped_files
from tidemark.jvm_jars import profile_jars
from tidemark.settings import Settings
from tidemark.tablefs import needs_s3a, s3_from_environment

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


JIT_HUGE_METHODS = "-XX:-DontCompileHugeMethods"
# JDBC drivers from Debian's packages (libpostgresql-jdbc-java, libmariadb-java), put on the
# driver's class path when present: with spark.jars alone DriverManager finds no driver.
JDBC_DRIVER_JARS = ("/usr/share/java/postgresql.jar", "/usr/share/java/mariadb-java-client.jar")


def jdbc_driver_class_path() -> str:
    """The JDBC driver jars present here, as a class path (``--driver-class-path`` of
    spark-submit: the driver JVM starts before the job's own conf is read)."""
    return ":".join(jar for jar in JDBC_DRIVER_JARS if Path(jar).is_file())


# Spark's s3a with explicit timeouts (milliseconds; Hadoop 3.4's defaults carry units, which
# older hadoop-aws named by TIDEMARK_S3A_JARS cannot parse).
S3A_NUMERIC_TIMEOUTS = {
    "fs.s3a.connection.timeout": "200000",
    "fs.s3a.connection.establish.timeout": "30000",
    "fs.s3a.threads.keepalivetime": "60",
    "fs.s3a.multipart.purge.age": "86400",
    "fs.s3a.retry.interval": "500",
    "fs.s3a.retry.throttle.interval": "100",
}


def s3a_jars(settings: Settings) -> list[str]:
    """hadoop-aws matching the wheel's Hadoop and its AWS SDK: ``TIDEMARK_S3A_JARS`` (comma
    separated), else jvm/pom.xml's ``s3a`` profile fetched by ``make jvm``. A production Spark
    ships its own matching pair."""

    configured = os.environ.get("TIDEMARK_S3A_JARS", "")
    if configured:
        return [j for j in configured.split(",") if j]
    return profile_jars("s3a")


def driver_class_path(settings: Settings) -> str:
    """The driver's extra class path: JDBC drivers, and s3a for a warehouse on S3 (only the
    driver's metastore client needs it; executors never load the 640 MB SDK bundle). spark-submit
    takes it as ``--driver-class-path``; a session started in-process as conf."""
    jars = [jar for jar in JDBC_DRIVER_JARS if Path(jar).is_file()]
    if needs_s3a(settings.warehouse):
        jars += s3a_jars(settings)
    return ":".join(jars)


def s3a_conf(settings: Settings) -> dict[str, str]:
    """Spark conf for a warehouse on S3. tidemark reads and writes the table files itself
    (``sparkfiles``, through pyarrow); the Hive metastore still needs a Hadoop FileSystem for
    every location it registers, so the session gets s3a with the endpoint and keys of the
    ``AWS_*`` environment (Spark redacts ``secret`` keys in its UI and logs)."""

    s3 = s3_from_environment()
    conf = {f"spark.hadoop.{k}": v for k, v in S3A_NUMERIC_TIMEOUTS.items()}
    if s3.get("endpoint"):
        conf["spark.hadoop.fs.s3a.endpoint"] = s3["endpoint"]
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(s3["endpoint"].startswith("https")).lower()
    if s3.get("access_key"):
        conf["spark.hadoop.fs.s3a.access.key"] = s3["access_key"]
        conf["spark.hadoop.fs.s3a.secret.key"] = s3.get("secret_key", "")
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        )
    if s3.get("region"):
        conf["spark.hadoop.fs.s3a.endpoint.region"] = s3["region"]
    if not s3a_jars(settings):  # on the driver's class path (driver_class_path): executors need none
        log.warning(
            "warehouse %s is on S3 but no hadoop-aws jars were found (make jvm, or "
            "TIDEMARK_S3A_JARS): registering partitions needs s3a on Spark's class path",
            settings.warehouse,
        )
    # the session catalog's own default location stays local: tidemark's tables are external
    conf["spark.sql.warehouse.dir"] = str(settings.home / "spark-warehouse")
    return conf


def executor_java_options(settings: Settings) -> str:
    return f"{JIT_HUGE_METHODS} {settings.jvm_options}".strip()


def class_archive(settings: Settings, class_path: str | None = None) -> Path | None:
    """The drivers' class archive of a driver class path (by default the settings' own): a
    JVM maps only an archive written with its own class path (``tidemark.jvm_classes``), so
    each has one: the settings' (``-s3a`` for an S3 warehouse's), or one named by the jars a
    table's jobs add to it (Iceberg's runtime: ``iceberg_catalog.spark_catalog_conf``)."""
    base = settings.class_archive
    own = driver_class_path(settings)
    if base is None or class_path is None or class_path == own:
        return base
    extra = [e for e in class_path.split(":") if e and e not in own.split(":")]
    tag = hashlib.sha256(":".join(extra).encode()).hexdigest()[:8]
    return base.with_name(f"{base.stem}-{tag}{base.suffix}")


ARCHIVE_OPTIONS = ("-XX:SharedArchiveFile=", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def with_class_archive(options: str, settings: Settings, class_path: str | None = None) -> str:
    """JVM ``options`` mapping the archive of ``class_path`` (any other archive's options
    dropped); none while there is no such archive, or when this JVM is the one writing it.
    With the archive the driver starts in about half the time; a JVM whose class path or
    build differs from the archive's ignores it, silently."""
    kept = " ".join(o for o in options.split() if not o.startswith(ARCHIVE_OPTIONS))
    archive = class_archive(settings, class_path)
    if archive is None or not archive.is_file() or "ArchiveClassesAtExit" in options:
        return kept
    return f"{kept} -XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off".strip()


def driver_java_options(settings: Settings, class_path: str | None = None) -> str:
    """The JVM options of a job's driver (``class_path``: its class path, when a table's
    jobs add jars to it): set on the spark-submit command line too, because a driver JVM
    spark-submit started cannot take them from the session's builder (in local mode it is
    also the executor, whose JIT the dump needs), with the class archive of its class path."""
    return with_class_archive(executor_java_options(settings), settings, class_path)


def session_conf(settings: Settings, *, hive: bool = True) -> dict[str, str]:
    """The Spark conf tidemark sets (before user overrides from TIDEMARK_SPARK_CONF)."""
    derby_home = settings.home
    conf = {
        "spark.sql.warehouse.dir": settings.warehouse,
        # Event-time partitioning does its own zone handling; the session stays in UTC so
        # timestamps never shift with the machine's zone.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        # A group's application runs its tables' jobs side by side, each in a pool of its own
        # (``TABLE_POOL``): one table's stalled or big job never holds the others' queue.
        "spark.scheduler.mode": "FAIR",
        # The dump's classification compiles to generated methods over HotSpot's 8000-byte JIT
        # limit; left interpreted they made it 2.6x slower (docs/benchmarks.md).
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={derby_home} {driver_java_options(settings)}",
        "spark.executor.extraJavaOptions": executor_java_options(settings),
        "spark.executorEnv.PYSPARK_PYTHON": settings.executor_python,
        "spark.pyspark.python": settings.executor_python,
        "spark.pyspark.driver.python": settings.python,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Parquet that Hive's own SerDe (2.x, 3.x; Impala, older Presto) reads: decimals as
        # fixed-length bytes and timestamps as INT96 (Spark's default INT32/INT64 decimals make
        # it fail with ETypeConverter), as pyarrow writes them (tableformat.arrow_writer)
        "spark.sql.parquet.writeLegacyFormat": "true",
        "spark.sql.parquet.outputTimestampType": "INT96",
    }
    if needs_s3a(settings.warehouse):
        conf.update(s3a_conf(settings))
    if settings.executor_python != settings.python:  # executors run the shipped venv
        conf["spark.files"] = ",".join(shipped_files(settings))
        if settings.executor_env_cache:
            conf[f"spark.executorEnv.{CACHE_ENV}"] = settings.executor_env_cache
    drivers = driver_class_path(settings)
    if drivers:  # effective for sessions started in-process; spark-submit needs the flag
        conf["spark.driver.extraClassPath"] = drivers
    jdbc = jdbc_driver_class_path()
    if jdbc:
        conf["spark.executor.extraClassPath"] = jdbc
    if hive:
        conf.update(metastore_conf(settings))
    return conf


def metastore_conf(settings: Settings) -> dict[str, str]:
    """The Hive metastore a session registers and reads tables in: the service of
    ``hive_metastore_uris``, else the embedded Derby under the home (one process at a time)."""
    if settings.hive_metastore_uris:
        return {"spark.hadoop.hive.metastore.uris": settings.hive_metastore_uris}
    return {
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={settings.metastore_dir};create=true",
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
    }


def library_zip(settings: Settings) -> Path:
    """Zip the tidemark package for remote executors (rebuilt each call: it is small)."""
    package = Path(__file__).resolve().parent
    target = settings.run_dir / "tidemark-lib.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(package.rglob("*.py")):
            zf.write(path, Path("tidemark") / path.relative_to(package))
    return target


def planned_session_conf(
    settings: Settings, *, hive: bool = True, extra_conf: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The conf :func:`build_session` builds a session with (readable before it starts)."""
    conf = session_conf(settings, hive=hive)
    conf.update(settings.spark_conf)
    conf.update(extra_conf or {})
    class_path = conf.get("spark.driver.extraClassPath")
    if class_path is not None and class_path != driver_class_path(settings):  # a table's jars added
        options = conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = with_class_archive(options, settings, class_path)
    return conf


def build_session(
    app_name: str,
    settings: Settings | None = None,
    *,
    hive: bool = True,
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Create (or reuse) the SparkSession for ``app_name``.

    Precedence of conf: tidemark defaults < TIDEMARK_SPARK_CONF < ``extra_conf``.
    """
    from pyspark.sql import SparkSession

    settings = settings or Settings.from_env()
    settings.home.mkdir(parents=True, exist_ok=True)
    # Executors (and the Python workers of a local session) must run the venv's interpreter,
    # or the shipped one (PySpark takes the executors' interpreter from this variable).
    os.environ["PYSPARK_PYTHON"] = settings.executor_python
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if settings.executor_python != settings.python:  # the same path on the driver: its own venv
        driver_launcher(settings)
    conf = planned_session_conf(settings, hive=hive, extra_conf=extra_conf)
    builder = SparkSession.builder.appName(app_name).master(settings.spark_master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    if hive:
        builder = builder.enableHiveSupport()
    spark = builder.getOrCreate()
    # When the JVM was started by spark-submit, -Dderby.system.home came too late: set it
    # now, before the (lazy) Hive client boots Derby, so derby.log lands in TIDEMARK_HOME.
    jvm = spark.sparkContext._jvm
    if jvm is not None and hive and not settings.hive_metastore_uris:
        jvm.java.lang.System.setProperty("derby.system.home", str(settings.home))
    if not settings.spark_master.startswith("local"):
        spark.sparkContext.addPyFile(str(library_zip(settings)))
    if jvm is None or not jvm.java.lang.System.getProperty("tidemark.jvm.log"):
        spark.sparkContext.setLogLevel("WARN")  # else its log4j2 sends INFO to a file (airflow.spark_log)
    log.info(
        "Spark session %s: master=%s version=%s warehouse=%s metastore=%s",
        app_name,
        settings.spark_master,
        spark.version,
        settings.warehouse,
        settings.hive_metastore_uris or f"derby:{settings.metastore_dir}",
    )
    return spark
