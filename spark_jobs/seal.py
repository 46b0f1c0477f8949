"""spark-submit entry point of sealing: parse args, build the session, call the library.

spark-submit spark_jobs/seal.py --table events --run-id RUN_ID
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="seal", description="Seal, register and amend the complete hours of one table."
    )
    parser.add_argument("--table", required=True, help="table name (conf/tables/<name>.yaml)")
    parser.add_argument("--run-id", required=True, help="Airflow run id (recorded in the partition journal)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from tidemark.config import load_table
    from tidemark.sealing import run_seal
    from tidemark.settings import Settings
    from tidemark.spark import build_session

    settings = Settings.from_env()
    config = load_table(args.table, settings)
    spark = build_session(f"tidemark-seal-{config.table}", settings, hive=True)
    try:
        result = run_seal(spark, config, settings, args.run_id)
    finally:
        spark.stop()
    print(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
