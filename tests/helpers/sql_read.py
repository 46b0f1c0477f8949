"""Read a query by table name as a Spark SQL user of the metastore would, in its own process
with a job's settings (the s3a client, the metastore service): ``python -m
tests.helpers.sql_read "SELECT ..."`` prints the rows as one JSON list."""

from __future__ import annotations

import json
import sys

from tidemark.spark import build_session


def main(query: str) -> None:
    spark = build_session("tidemark-sql-read")
    try:
        rows = [r.asDict() for r in spark.sql(query).collect()]
    finally:
        spark.stop()
    print(json.dumps(rows, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
