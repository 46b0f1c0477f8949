"""Read queries by table name as a Spark SQL user of the metastore would, in a process of its
own with a job's settings (the s3a client, the metastore service): ``python -m
tests.helpers.sql_read "SELECT ..." ["SELECT ..." ...]`` prints each query's rows, as one JSON
list of lists (one Spark session for them all)."""

from __future__ import annotations

import json
import sys

from tidemark.spark import build_session


def main(queries: list[str]) -> None:
    spark = build_session("tidemark-sql-read")
    try:
        rows = [[r.asDict() for r in spark.sql(query).collect()] for query in queries]
    finally:
        spark.stop()
    print(json.dumps(rows, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
