"""delta-spark on S3 in a process of its own (its jars on the class path from the JVM's start):
``python -m tests.helpers.delta_s3_writer <table uri>``. Creates a Delta table there with
delta-rs, MERGEs one row into it with tidemark's spark engine (the session of
``tidemark.delta_spark``: the conditional log store), then writes one commit file twice
through the session's log store, as two writers of one version would; prints what happened as
one JSON line."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

import pyarrow as pa  # noqa: TID253

from tidemark.delta_spark import S3_LOG_STORE, delta_spark_conf
from tidemark.settings import Settings
from tidemark.snapshot.delta_engines import DeltaCommit, SparkDeltaEngine
from tidemark.snapshot.versioned import DELETE_FLAG
from tidemark.spark import build_session
from tidemark.tablefs import delta_storage_options, hadoop_uri


def main(uri: str) -> None:
    from deltalake import DeltaTable, write_deltalake

    settings = replace(Settings.from_env(), warehouse=uri.rsplit("/", 1)[0])  # s3a on the class path
    schema = pa.schema([("order_id", pa.int64()), ("version", pa.int64())])
    write_deltalake(uri, schema.empty_table(), storage_options=delta_storage_options(uri))
    spark = build_session("delta-s3-writer", settings, hive=False, extra_conf=delta_spark_conf())
    result: dict[str, object] = {}
    try:
        commit = DeltaCommit(
            "orders",
            uri,
            1,
            "tidemark-snapshot-orders",
            {"run_id": "merge-1"},
            (("order_id", "bigint"), ("version", "bigint")),
            ("order_id",),
            "version",
            1 << 20,
        )
        source = spark.createDataFrame(
            [(1, 1, False)], f"order_id bigint, version bigint, {DELETE_FLAG} boolean"
        )
        metrics = SparkDeltaEngine(spark).merge(source, schema, commit, only_newer=True)
        table = DeltaTable(uri, storage_options=delta_storage_options(uri))
        result["merged"] = [table.version(), metrics.get("num_target_rows_inserted")]
        # two writers of version 2's commit file: the second is refused by the store
        jvm: Any = spark._jvm
        hadoop = spark._jsc.hadoopConfiguration()
        store = jvm.io.tidemark.delta.S3ConditionalLogStore(hadoop)
        path = jvm.org.apache.hadoop.fs.Path(hadoop_uri(f"{uri}/_delta_log/{2:020d}.json"))
        outcomes = []
        for writer in ("first", "second"):
            lines = jvm.java.util.ArrayList()
            lines.add(json.dumps({"commitInfo": {"writer": writer}}))
            try:
                store.write(path, lines.iterator(), False, hadoop)
                outcomes.append("written")
            except Exception as exc:  # Py4J's error carrying the Java exception
                outcomes.append(str(exc).split("\n")[1][:200] if "\n" in str(exc) else str(exc)[:200])
        stream = path.getFileSystem(hadoop).open(path)
        reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream))
        result["second_writer"] = outcomes
        result["version_2_holds"] = reader.readLine()
        reader.close()
        used = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, hadoop_uri(uri)).store()
        inner = used.getDelegate(path)  # Delta's DelegatingLogStore: the store of the path's scheme
        if "Adaptor" in inner.getClass().getName():  # a Java LogStore behind Delta's Scala one
            inner = inner.logStoreImpl()
        result["log_store"] = inner.getClass().getName() == S3_LOG_STORE  # what Delta commits through
        result["store_classes"] = [used.getClass().getName(), inner.getClass().getName()]
    finally:
        spark.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
