"""The drivers' class-data-sharing archive: Spark's driver JVM starts in about half the time.

A Spark driver loads some 15,000 classes from 400 jars before it runs anything; that is most
of the 6-7 s a job's session takes to start here (docs/benchmarks.md). A dynamic AppCDS
archive (JDK 13+) written once by a representative session maps them in instead. Every job
driver then gets ``-XX:SharedArchiveFile`` (``tidemark.spark.driver_java_options``). The
archive is only valid for the class path and JVM build it was written with; a JVM that
differs (another JDK, an added jar, the s3a jars of an S3 warehouse) ignores it silently and
starts as before, so a stale archive costs time, never correctness. ``ensure`` writes it again
when its recorded fingerprint (class path, Java, pyspark) no longer matches. There is one per
driver class path (``spark.class_archive``): the local warehouse's, an S3 warehouse's (the
s3a jars added: ``spark-classes-s3a.jsa``) and an Iceberg table's jobs', local or on S3
(Iceberg's runtime added: ``spark-classes-<tag>.jsa``), each written when ``make jvm``
fetched its jars.
Delta's jars come through ``spark.jars``, a class loader of Spark's: its jobs map the first.

    python -m tidemark.jvm_classes        # make spark-classes
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from tidemark.iceberg_catalog import spark_catalog_conf
from tidemark.jvm_jars import profile_jars
from tidemark.settings import Settings
from tidemark.spark import build_session, class_archive, driver_class_path, s3a_jars

log = logging.getLogger(__name__)


def fingerprint(settings: Settings, class_path: str | None = None) -> str:
    """What the archive depends on: the driver's class path, the JVM build, pyspark's jars."""
    import pyspark

    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    own = driver_class_path(settings) if class_path is None else class_path
    text = json.dumps([own, java, pyspark.__version__, jars])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _record(archive: Path) -> Path:
    return archive.with_suffix(".json")


def is_current(settings: Settings, class_path: str | None = None) -> bool:
    archive = class_archive(settings, class_path)
    if archive is None or not archive.is_file() or not _record(archive).is_file():
        return False
    recorded = json.loads(_record(archive).read_text()).get("fingerprint")
    return bool(recorded == fingerprint(settings, class_path))


def write_archive(settings: Settings, archive: Path, class_path: str | None = None) -> None:
    """Run a representative session (metastore, Parquet, the Python data source, Arrow) in a
    scratch home with ``-XX:ArchiveClassesAtExit``, wait for its JVM to exit (it writes the
    archive then), and move the archive into place."""
    from pyspark.sql import functions as F

    from tidemark.sparkfiles import read_files

    archive.parent.mkdir(parents=True, exist_ok=True)
    if class_path is None:
        class_path = driver_class_path(settings)  # an S3 warehouse's jars, the session's own is local
    with tempfile.TemporaryDirectory(prefix="tidemark-classes-") as scratch:
        partial = Path(scratch) / "classes.jsa"
        own = replace(
            settings,
            home=Path(scratch) / "home",
            warehouse=str(Path(scratch) / "home" / "warehouse"),
            jvm_options=f"{settings.jvm_options} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off".strip(),
            jvm_class_archive="off",
        )
        spark = build_session(
            "tidemark-jvm-classes",
            own,
            hive=True,
            extra_conf={"spark.driver.extraClassPath": class_path} if class_path else None,
        )
        gateway = spark.sparkContext._gateway
        if gateway is None or getattr(gateway, "proc", None) is None:
            raise RuntimeError("the session's JVM was not started by this process")
        data = Path(scratch) / "data"
        frame = spark.range(1000).select(F.col("id"), (F.col("id") % 7).cast("string").alias("k"))
        frame.write.mode("overwrite").parquet(str(data))
        spark.sql(f"CREATE TABLE IF NOT EXISTS classes (id bigint, k string) USING parquet LOCATION '{data}'")
        spark.table("classes").groupBy("k").agg(F.max_by("id", "id")).collect()
        files = [str(p) for p in data.glob("*.parquet")]
        read_files(spark, files, "id bigint, k string").toArrow()
        spark.stop()
        process = gateway.proc  # the JVM exits when its stdin closes, and writes the archive
        gateway.shutdown()
        process.stdin.close()
        process.wait(timeout=300)
        if not partial.is_file():
            raise RuntimeError(f"the JVM wrote no class archive ({partial}); is Java 13+ in use?")
        os.replace(partial, archive)
    _record(archive).write_text(json.dumps({"fingerprint": fingerprint(settings, class_path)}))
    log.info("class archive written: %s (%.0f MB)", archive, archive.stat().st_size / 1e6)


def ensure(settings: Settings, class_path: str | None = None) -> Path | None:
    """The archive of a driver class path (``settings``' own by default), written first if
    missing or stale; None when off or when this JVM cannot write one (jobs then start
    without it: slower, nothing else)."""
    archive = class_archive(settings, class_path)
    if archive is None:
        return None
    if not is_current(settings, class_path):
        try:
            write_archive(settings, archive, class_path)
        except Exception as exc:  # an optimization: never a reason to stop an install
            log.warning("class archive not written (%s): Spark drivers start without it", exc)
            return None
    return archive


# the variants, each a warehouse (its class path: s3a's jars on S3) and the jar profile a
# table's jobs add to the driver's class path, by the conf they are launched with
PROFILE_CONFS = {"iceberg": spark_catalog_conf}
VARIANTS = {
    "local": ("", ""),
    "s3a": ("s3://tidemark-class-archive/warehouse", ""),
    "iceberg": ("", "iceberg"),
    "iceberg-s3a": ("s3://tidemark-class-archive/warehouse", "iceberg"),
}


def variant(settings: Settings, name: str) -> tuple[Settings, str | None]:
    """The settings and driver class path of variant ``name`` (None: the settings' own)."""
    warehouse, profile = VARIANTS[name]
    own = replace(settings, warehouse=warehouse or str(settings.home / "warehouse"))
    if not profile:
        return own, None
    return own, PROFILE_CONFS[profile](own)["spark.driver.extraClassPath"]  # exactly the jobs' own


def fetched(settings: Settings) -> list[str]:
    """The variants whose jars ``make jvm`` fetched."""
    return [
        name
        for name, (warehouse, profile) in VARIANTS.items()
        if (not warehouse or s3a_jars(settings)) and (not profile or profile_jars(profile))
    ]


def ensure_all(settings: Settings) -> list[Path]:
    """Every archive whose jars are fetched (see the module). Each is written by a process of
    its own: a PySpark process starts one JVM gateway, and a second session after the first
    one's JVM exited cannot reach it."""

    written = []
    for name in fetched(settings):
        own, class_path = variant(settings, name)
        archive = class_archive(own, class_path)
        if archive is None:
            continue
        if not is_current(own, class_path):
            subprocess.run([sys.executable, "-m", "tidemark.jvm_classes", name], check=False)
        if is_current(own, class_path):
            written.append(archive)
    return written


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if len(sys.argv) > 1:  # one archive, in this process
        ensure(*variant(Settings.from_env(), sys.argv[1]))
        sys.exit(0)
    written = ensure_all(Settings.from_env())
    print(
        f"tidemark: class archives {', '.join(map(str, written)) or 'off (TIDEMARK_JVM_CLASS_ARCHIVE=off)'}"
    )
    sys.exit(0)
