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
import sys

from tidemark.jobs import reader_conf
from tidemark.settings import Settings
from tidemark.spark import build_session


def main(arguments: list[str]) -> None:
    exact = arguments[:1] == ["--pickle"]
    queries = arguments[1:] if exact else arguments
    settings = Settings.from_env()
    spark = build_session("tidemark-sql-read", settings, extra_conf=reader_conf(settings))
    try:
        rows = [[r.asDict(recursive=exact) for r in spark.sql(query).collect()] for query in queries]
    finally:
        spark.stop()
    print(base64.b64encode(pickle.dumps(rows)).decode() if exact else json.dumps(rows, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
