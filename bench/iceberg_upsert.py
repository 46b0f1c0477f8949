"""The rejected candidate of issue 19: pyiceberg 0.12's ``Table.upsert`` at CDC sizes.

pyiceberg is not a tidemark dependency; run this in a scratch venv:

    python3.11 -m venv /tmp/ice && /tmp/ice/bin/pip install "pyiceberg[sql-sqlite,pyarrow]==0.12.0" numpy
    /tmp/ice/bin/python bench/iceberg_upsert.py [--snapshot-rows 10000000] [--increment-rows 1000000]

A SqlCatalog on SQLite in a scratch directory, N orders appended in one commit, then one
``upsert`` (join on ``order_id``) of M changes: 66% updates of random existing orders, 34%
inserts (``upsert`` has no deletes; a CDC merge would need a separate ``delete`` with a
filter of the deleted keys). Prints the upsert's wall time; compare with bench/upsert.py
(delta-rs MERGE of the same shape) and bench/merge.py. Not a test.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time


def main() -> None:
    import numpy as np
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot-rows", type=int, default=10_000_000)
    parser.add_argument("--increment-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    n, m = args.snapshot_rows, args.increment_rows
    scratch = tempfile.mkdtemp(prefix="tidemark-bench-iceberg-")
    catalog = SqlCatalog("bench", uri=f"sqlite:///{scratch}/catalog.db", warehouse=f"file://{scratch}/wh")
    catalog.create_namespace("bench")
    ids = np.arange(1, n + 1, dtype=np.int64)
    snapshot = pa.table(
        {"order_id": ids, "version": np.ones(n, dtype=np.int64), "status": pa.array(["created"] * n)}
    )
    table = catalog.create_table("bench.orders", schema=snapshot.schema)
    table.append(snapshot)
    rng = np.random.default_rng(7)
    updates = rng.choice(n, size=int(m * 0.66), replace=False) + 1
    keys = np.concatenate([updates, n + 1 + np.arange(m - len(updates))]).astype(np.int64)
    changes = pa.table(
        {
            "order_id": keys,
            "version": np.full(len(keys), 2, dtype=np.int64),
            "status": pa.array(["paid"] * len(keys)),
        }
    )
    started = time.perf_counter()
    result = table.upsert(changes, join_cols=["order_id"])
    print(
        f"pyiceberg upsert N={n:,} M={m:,}: {time.perf_counter() - started:.1f} s "
        f"({result.rows_updated:,} updated, {result.rows_inserted:,} inserted)"
    )


if __name__ == "__main__":
    if importlib.util.find_spec("pyiceberg") is None:  # `make bench` runs every script in the venv
        print("bench/iceberg_upsert.py: not run: pyiceberg is not a tidemark dependency; see its docstring")
        sys.exit(0)
    main()
