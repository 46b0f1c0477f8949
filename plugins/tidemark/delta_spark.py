"""What a Spark session needs to write and register Delta tables itself: delta-spark on its
class path, the Delta SQL extension and ``DeltaCatalog`` as the session catalog.

The jobs of a Delta-snapshot table get it (``jobs.table_session_conf``: the MERGE of
``cdc.merge_engine: spark``, and the metastore entry every engine registers):
delta-spark 4.3 (``jvm/pom.xml``'s ``delta`` profile, without the jars the pyspark wheel
already ships) is the release built on Spark 4.1. ``DeltaCatalog`` delegates every non-Delta
table to the Hive session catalog, so the same session still reads and registers Hive tables
(verified with embedded Derby, session 30). On S3, Delta commits through tidemark's log store
(``jvm/logstore``, compiled by ``make jvm``): each commit file a conditional PUT, so a second
writer of one version is refused by the store (docs/operations.md, "Who writes").
"""

from __future__ import annotations

from tidemark.jvm_jars import require_jars

EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
# jvm/logstore, compiled by `make jvm`: each commit file a conditional PUT on S3
S3_LOG_STORE = "io.tidemark.delta.S3ConditionalLogStore"
S3_LOG_STORE_CONF = "spark.delta.logStore.s3a.impl"
CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def delta_spark_conf() -> dict[str, str]:
    """Spark conf of a session that writes Delta with delta-spark."""
    return {
        "spark.jars": ",".join([*require_jars("delta"), *require_jars("delta-logstore")]),
        "spark.sql.extensions": EXTENSION,
        "spark.sql.catalog.spark_catalog": CATALOG,
        # tidemark reads every version it writes with delta-rs too (recovery, VACUUM, reads):
        # no deletion vectors, no features delta-rs cannot read
        "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
        # on S3, a second writer of one version is refused by the store (a conditional PUT),
        # and the refused writer fails instead of retrying on top (one writer under the lock)
        S3_LOG_STORE_CONF: S3_LOG_STORE,
        "spark.databricks.delta.maxCommitAttempts": "1",
    }
