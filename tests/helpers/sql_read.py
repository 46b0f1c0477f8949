"""Read queries by table name as a Spark SQL user of the metastore would, in a process of its
own with a job's settings (the s3a client, the metastore service): ``python -m
tests.helpers.sql_read [--pickle] "SELECT ..." ["SET k=v" "SELECT ..." ...]`` prints each
query's rows (Hive and Delta tables by name, Iceberg ones as ``iceberg.default.<table>``:
``jobs.reader_conf``), as one JSON list of lists (one Spark session for them all); ``--pickle``: the
rows with their Python values (``Row.asDict(recursive=True)``: NaN, bytes, Decimal, datetime),
pickled and base64-encoded on the last line."""

from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys
from pathlib import Path

from tests.helpers.jobs import job_env
from tidemark.iceberg_catalog import open_catalog
from tidemark.jobs import reader_conf, spark_environment, spark_home
from tidemark.settings import Settings
from tidemark.spark import build_session


def main(arguments: list[str]) -> None:
    exact = arguments[:1] == ["--pickle"]
    queries = arguments[1:] if exact else arguments
    settings = Settings.from_env()
    open_catalog(settings)  # the catalog's database and namespace: a reader's conf only names it
    spark = build_session("tidemark-sql-read", settings, extra_conf=reader_conf(settings))
    try:
        rows = [[r.asDict(recursive=exact) for r in spark.sql(query).collect()] for query in queries]
    finally:
        spark.stop()
    print(base64.b64encode(pickle.dumps(rows)).decode() if exact else json.dumps(rows, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])


def spark_sql(settings: Settings, query: str, workdir: Path) -> list[list[str]]:
    """``query``'s rows (tab-separated fields) as Spark's own ``spark-sql`` shell prints them,
    started with the properties ``tidemark spark-conf`` prints: what a user of their own Spark
    does to read tidemark's tables by name."""
    env = job_env(settings)
    tidemark = Path(sys.executable).parent / "tidemark"
    printed = subprocess.run(
        [str(tidemark), "spark-conf", "--show-secrets"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert printed.returncode == 0, printed.stderr[-2000:]
    properties = workdir / "reader.conf"
    properties.write_text(printed.stdout)
    shell = Path(spark_home()) / "bin" / "spark-sql"
    done = subprocess.run(
        [str(shell), "--properties-file", str(properties), "-S", "-e", query],
        env=spark_environment(settings, env),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    errors = [x for x in done.stderr.splitlines() if "Exception" in x and not x.startswith("\tat ")]
    assert done.returncode == 0, "\n".join(errors[:10]) or done.stderr[-2000:]
    return [line.split("\t") for line in done.stdout.splitlines() if line.strip()]
