"""Record-level upserts for CDC snapshots: delta-rs MERGE against a full rewrite.

    .venv/bin/python bench/upsert.py [--snapshot-rows 10000000] [--increment-rows 1000000] [--hot 1.0]

The candidate of issue 19 for ``<table>_snapshot``: a Delta table updated in place by
``DeltaTable.merge`` (deltalake 1.6.6, delta-rs), instead of today's merge that rewrites the
whole snapshot (``bench/merge.py``: Spark, 3.1x a plain copy). In a scratch directory it
writes (``prepare``, not timed) a Delta snapshot of N orders, sorted by key, and M change rows
like bench/merge.py's (60% updates of existing orders, 30% inserts, 10% deletes, 5% sent
twice). Then, each in its own process:

(a) ``merge``: dedup the changes (latest version per key), then one MERGE (delete, update if
    newer, insert), committed with an app transaction (``tidemark-merge``, version 1); a
    second attempt sees ``transaction_version`` and does nothing (the exactly-once check a
    retried merge needs: delta-rs does not deduplicate commits by itself);
(b) ``copy``: read the snapshot and the changes and write them out unchanged with pyarrow
    (no dedup): the I/O floor of a full rewrite with the same Arrow/Rust stack;
(c) ``merge`` again at N / 5 with the same M: does the cost follow the increment or the
    snapshot?

Prints wall time, peak RSS of the process tree, files rewritten, and the ratios. Compare
with bench/merge.py's Spark full merge run in the same sitting. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump_throughput import run_measured

from tidemark.tablefs import delta_storage_options as storage_options
from tidemark.tablefs import filesystem

APP_ID = "tidemark-merge"
FILE_ROWS = 1_000_000  # rows per snapshot file (~10 MB): 10 files for 10M rows


def _snapshot(rows: int) -> Any:
    import numpy as np
    import pyarrow as pa

    ids = np.arange(1, rows + 1, dtype=np.int64)
    return pa.table(
        {
            "order_id": ids,
            "version": np.ones(rows, dtype=np.int64),
            "customer_id": ids % 5000,
            "status": pa.array(["created"] * rows),
            "amount": (ids % 90000) / 100.0,
        }
    )


def _changes(snapshot_rows: int, rows: int, hot: float, seed: int = 7) -> Any:
    """M changes; updates and deletes hit the newest ``hot`` fraction of the keys (1.0:
    uniformly, like bench/merge.py; CDC updates of orders mostly hit recent ones)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    updates, inserts = int(rows * 0.6), int(rows * 0.3)
    deletes = rows - updates - inserts
    pool = max(updates + deletes, int(snapshot_rows * hot))
    existing = rng.choice(pool, size=updates + deletes, replace=False) + (snapshot_rows - pool) + 1
    keys = np.concatenate([existing[:updates], snapshot_rows + 1 + np.arange(inserts), existing[updates:]])
    ops = np.array(["u"] * updates + ["c"] * inserts + ["d"] * deletes)
    twice = rng.choice(rows, size=rows // 20, replace=False)  # 5% sent twice: same key, same version
    keys, ops = np.concatenate([keys, keys[twice]]), np.concatenate([ops, ops[twice]])
    return pa.table(
        {
            "order_id": keys.astype(np.int64),
            "version": np.full(len(keys), 2, dtype=np.int64),
            "customer_id": keys % 5000,
            "status": pa.array(np.where(ops == "d", "deleted", "paid")),
            "amount": (keys % 90000) / 100.0 + 1,
            "op": pa.array(ops),
        }
    )


def latest_per_key(changes: Any) -> Any:
    """The newest change of each key (version, then arrival order): what a merge applies."""
    import numpy as np
    import pyarrow as pa

    order = np.lexsort(
        (
            -np.arange(len(changes)),
            -changes.column("version").to_numpy(),
            changes.column("order_id").to_numpy(),
        )
    )
    ordered = changes.take(pa.array(order))
    keys = ordered.column("order_id").to_numpy()
    first = np.r_[True, keys[1:] != keys[:-1]]
    return ordered.filter(pa.array(first))


# -- workers (each in its own process) -------------------------------------------------------
def prepare(
    root: Path, snapshot_rows: int, increment_rows: int, hot: float, snapshot: str = ""
) -> dict[str, Any]:
    """The snapshot (at ``snapshot``, a URI, else under ``root``) and the changes (in ``root``)."""
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    uri = snapshot or str(root / "snapshot")
    frame = _snapshot(snapshot_rows)
    for i in range(0, snapshot_rows, FILE_ROWS):  # one commit per file: files of ~FILE_ROWS rows
        write_deltalake(uri, frame.slice(i, FILE_ROWS), mode="append", storage_options=storage_options(uri))
    pq.write_table(_changes(snapshot_rows, increment_rows, hot), root / "changes.parquet")
    return {"snapshot_rows": snapshot_rows, "increment_rows": increment_rows}


def merge(root: Path, snapshot: str = "") -> dict[str, Any]:
    """One MERGE of the changes into the snapshot, with tidemark's delta-rs settings for its
    store (on S3: every commit a conditional PUT)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    uri = snapshot or str(root / "snapshot")
    options = storage_options(uri)
    started = time.perf_counter()
    table = DeltaTable(uri, storage_options=options)
    files_before = set(table.file_uris())
    if (table.transaction_version(APP_ID) or 0) >= 1:
        return {"skipped": True}
    changes = latest_per_key(pq.read_table(root / "changes.parquet"))
    metrics = _execute(table, changes)
    seconds = time.perf_counter() - started
    table = DeltaTable(uri, storage_options=options)
    retried = (table.transaction_version(APP_ID) or 0) >= 1  # a retry of this merge would skip
    files_after = set(table.file_uris())
    rows = 0
    for uri_of_file in files_after:
        fs, path = filesystem(uri_of_file)
        with fs.open_input_file(path) as handle:
            rows += pq.ParquetFile(handle).metadata.num_rows
    return {
        "seconds": seconds,
        "rows_out": rows,
        "files_before": len(files_before),
        "files_rewritten": len(files_before - files_after),
        "files_added": len(files_after - files_before),
        "retry_would_skip": retried,
        "metrics": {k: metrics[k] for k in sorted(metrics) if k.startswith("num_")},
    }


def _execute(table: Any, changes: Any) -> dict[str, Any]:
    from deltalake import CommitProperties, Transaction

    merger = table.merge(
        changes,
        predicate="t.order_id = s.order_id",
        source_alias="s",
        target_alias="t",
        commit_properties=CommitProperties(app_transactions=[Transaction(APP_ID, 1)]),
    )
    merger = merger.when_matched_delete(predicate="s.op = 'd'")
    merger = merger.when_matched_update(
        predicate="s.op <> 'd' AND s.version > t.version",
        updates={c: f"s.{c}" for c in ("version", "customer_id", "status", "amount")},
    )
    merger = merger.when_not_matched_insert(
        predicate="s.op <> 'd'",
        updates={c: f"s.{c}" for c in ("order_id", "version", "customer_id", "status", "amount")},
    )
    return dict(merger.execute())


def copy(root: Path) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    started = time.perf_counter()
    snapshot = ds.dataset(DeltaTable(str(root / "snapshot")).file_uris(), format="parquet").to_table()
    changes = pq.read_table(root / "changes.parquet").drop(["op"])
    out = root / "copy"
    shutil.rmtree(out, ignore_errors=True)
    ds.write_dataset(
        pa.concat_tables([snapshot, changes.cast(snapshot.schema)]),
        out,
        format="parquet",
        max_rows_per_file=FILE_ROWS,
        max_rows_per_group=FILE_ROWS,
    )
    return {"seconds": time.perf_counter() - started, "rows_out": len(snapshot) + len(changes)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshot-rows", type=int, default=10_000_000)
    parser.add_argument("--increment-rows", type=int, default=1_000_000)
    parser.add_argument(
        "--hot",
        type=float,
        default=1.0,
        help="fraction of the newest keys updates hit (default 1.0: uniform)",
    )
    parser.add_argument("--worker", choices=("prepare", "merge", "copy"), help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--snapshot-uri", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        workers = {
            "prepare": lambda: prepare(
                args.root, args.snapshot_rows, args.increment_rows, args.hot, args.snapshot_uri
            ),
            "merge": lambda: merge(args.root, args.snapshot_uri),
            "copy": lambda: copy(args.root),
        }
        print(json.dumps(workers[args.worker]()))
        return 0

    scratch = Path(tempfile.mkdtemp(prefix="tidemark-bench-upsert-"))
    env = dict(os.environ)
    try:

        def worker(name: str, root: Path, snapshot_rows: int) -> tuple[dict[str, Any], float, float]:
            command = [sys.executable, __file__, "--worker", name, "--root", str(root)]
            command += ["--snapshot-rows", str(snapshot_rows), "--increment-rows", str(args.increment_rows)]
            command += ["--hot", str(args.hot)]
            return run_measured(command, env)

        big, small = scratch / "big", scratch / "small"
        small_rows = args.snapshot_rows // 5
        t0 = time.perf_counter()
        worker("prepare", big, args.snapshot_rows)
        worker("prepare", small, small_rows)
        prepared = time.perf_counter() - t0
        merged, merge_wall, merge_rss = worker("merge", big, args.snapshot_rows)
        again, _, _ = worker("merge", big, args.snapshot_rows)
        copied, copy_wall, copy_rss = worker("copy", big, args.snapshot_rows)
        merged_small, small_wall, _ = worker("merge", small, small_rows)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"machine: {platform.node()} {os.cpu_count()} cores, python {platform.python_version()}")
    print(
        f"N = {args.snapshot_rows:,} snapshot rows, M = {args.increment_rows:,} change rows, updates on the "
        f"newest {args.hot:.0%} of keys; prepare {prepared:.1f} s"
    )
    print(
        f"(a) delta MERGE   wall {merge_wall:6.1f} s  merge {merged['seconds']:6.1f} s  peak RSS {merge_rss:7.0f} MB"
    )
    print(
        f"    files {merged['files_before']} before, {merged['files_rewritten']} rewritten, {merged['files_added']} added; rows out {merged['rows_out']:,}"
    )
    print(f"    metrics {merged['metrics']}")
    print(f"    a retried merge: {'skipped (app transaction seen)' if again.get('skipped') else 'RAN AGAIN'}")
    print(
        f"(b) pyarrow copy  wall {copy_wall:6.1f} s  copy  {copied['seconds']:6.1f} s  peak RSS {copy_rss:7.0f} MB"
    )
    print(
        f"(c) delta MERGE at N/5 = {small_rows:,}: wall {small_wall:6.1f} s  merge {merged_small['seconds']:6.1f} s"
    )
    print(
        f"a/b = {merged['seconds'] / copied['seconds']:.2f}; a/c = {merged['seconds'] / merged_small['seconds']:.2f} (5.0 if the cost followed the snapshot, 1.0 if the increment)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
