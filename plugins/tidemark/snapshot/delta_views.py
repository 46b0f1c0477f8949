"""A Delta snapshot readable by name from Spark SQL through the metastore, with no Delta jars.

Why views. Spark without delta-spark, Hive and Trino's Hive connector read a Parquet table as
every file under its location, and a Delta table's directory holds the files of every
version: read that way, it would double rows. A Delta version is a list of files, and Spark
SQL can name files (``parquet.`<file>```), so after every commit tidemark registers two
persistent views in the metastore, recomputed from the snapshot log (each record names its
Delta version's files), under the table's snapshot lock:

- ``<table>_snapshot``: the current version (the Delta table's head), with the label it
  holds in ``snapshot_dt``;
- ``<table>_snapshot_labels``: every kept label (``cdc.keep_labels``, and as many as fit in
  the metastore's limit on a view's text), one per ``snapshot_dt`` value, so
  ``SELECT ... FROM <table>_snapshot_labels WHERE snapshot_dt = 'L'`` is label ``L`` (the
  same query as a Parquet-format ``<table>_snapshot``); Spark prunes the other labels' files
  from the plan, but resolving the view reads one footer per file of every live label.

Each column is cast to the table's type, so a view has the YAML's schema whatever the writer
chose. Registering reads no file (``register_view``): Spark resolves the files when the view
is read, so a reader needs what reading any table of the warehouse needs (s3a on S3). The views are derived state: a job that dies before refreshing them is made good by
the next bootstrap or merge of the table (its recovery or its "already done" path refreshes
them too). Engines that read Delta itself (delta-spark, Trino's Delta Lake connector, Hive's
Delta connector) read the table's location directly: docs/snapshots.md lists what each reads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tidemark.seal.metastore import DATABASE, qualified, quote_identifier, quote_value
from tidemark.snapshot.snapshots import PARTITION_COLUMN, SnapshotRecord
from tidemark.tablefs import hadoop_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

LABELS_SUFFIX = "_labels"
# The embedded Derby metastore keeps a view's text in a LONG VARCHAR (32,700 characters): a
# longer text is refused. The labels view keeps the newest labels that fit.
VIEW_TEXT_LIMIT = 32_000


def version_sql(root: str, columns: Sequence[tuple[str, str]], record: SnapshotRecord) -> str:
    """The rows of ``record``'s Delta version: one SELECT per file of it (Spark SQL takes one
    path per ``parquet.`...```), cast to the table's types, its label as ``snapshot_dt``."""
    label = f"{quote_value(record.label)} AS {quote_identifier(PARTITION_COLUMN)}"
    if not record.files:  # an empty version: no rows, the same columns
        return f"SELECT {_nulls(columns)}, {label} WHERE false"
    cast = ", ".join(f"CAST({quote_identifier(n)} AS {t}) AS {quote_identifier(n)}" for n, t in columns)
    return " UNION ALL ".join(
        f"SELECT {cast}, {label} FROM parquet.{quote_identifier(hadoop_uri(f'{root}/{name}'))}"
        for name in record.files
    )


def empty_sql(columns: Sequence[tuple[str, str]]) -> str:
    """A view's columns without rows or files: what fixes its schema (see ``register_view``)."""
    return (
        f"SELECT {_nulls(columns)}, CAST(NULL AS STRING) AS {quote_identifier(PARTITION_COLUMN)} WHERE false"
    )


def _nulls(columns: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"CAST(NULL AS {t}) AS {quote_identifier(n)}" for n, t in columns)


def views_sql(
    root: str,
    columns: Sequence[tuple[str, str]],
    head: SnapshotRecord,
    live: Sequence[SnapshotRecord],
    limit: int = VIEW_TEXT_LIMIT,
) -> tuple[str, str, list[str]]:
    """The queries of the current version's view and of the newest live labels whose text
    fits in ``limit`` characters (the head's label always), and the labels left out."""
    labels = sorted(live, key=lambda r: r.table_version)
    parts = [version_sql(root, columns, r) for r in labels]
    while len(parts) > 1 and sum(map(len, parts)) + len(" UNION ALL ") * (len(parts) - 1) > limit:
        parts.pop(0)
    left_out = [r.label for r in labels[: len(labels) - len(parts)]]
    return version_sql(root, columns, head), " UNION ALL ".join(parts), left_out


def register_view(spark: SparkSession, view: str, columns: Sequence[tuple[str, str]], text: str) -> None:
    """``CREATE OR REPLACE VIEW view AS text`` in one metastore call, without reading a file.

    Spark resolves a view's query when it is created, which infers each ``parquet.`...```
    file's schema with a Spark job: on a cluster whose executors have no s3a (tidemark reads
    S3 with pyarrow in its tasks), that fails, and it reads every footer at every commit. So
    the view's schema and Spark's view properties come from a view of the same columns
    without files (a template, dropped again), and the definition with ``text`` is written
    through Spark's session catalog: one create, or one alter that readers see whole. Spark
    resolves ``text`` when the view is read. A Spark whose catalog classes differ falls back to
    the plain statement."""
    jvm: Any = spark._jvm
    session: Any = spark._jsparkSession
    template = f"{view}__tidemark_template"
    spark.sql(f"CREATE OR REPLACE VIEW {qualified(template)} AS {empty_sql(columns)}")
    try:
        catalog = session.sessionState().catalog()
        database = jvm.scala.Some.apply(DATABASE)
        shape = catalog.getTableMetadata(
            jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(template, database)
        )
        target = jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(view, database)
        definition = _with_text(jvm, shape, target, text)
        if definition is None:
            log.warning(
                "%s: this Spark's CatalogTable is not the one tidemark knows: CREATE VIEW reads files", view
            )
            spark.sql(f"CREATE OR REPLACE VIEW {qualified(view)} AS {text}")
        elif catalog.tableExists(target):
            catalog.alterTable(definition)
        else:
            catalog.createTable(definition, False, False)
    finally:
        spark.sql(f"DROP VIEW IF EXISTS {qualified(template)}")


def _with_text(jvm: Any, shape: Any, target: Any, text: str) -> Any:
    """``shape`` (a CatalogTable) renamed to ``target`` with view text ``text``; None when the
    case class is not Spark 4.1's (21 fields)."""
    copies = [m for m in shape.getClass().getMethods() if m.getName() == "copy"]
    if len(copies) != 1 or len(copies[0].getParameterTypes()) != 21:
        return None
    some = jvm.scala.Some.apply(text)
    properties = shape.properties()
    for key in _captured_catalog_confs(properties):
        properties = properties.removed(key)
    return shape.copy(
        target,
        shape.tableType(),
        shape.storage(),
        shape.schema(),
        shape.provider(),
        shape.partitionColumnNames(),
        shape.bucketSpec(),
        shape.owner(),
        shape.createTime(),
        shape.lastAccessTime(),
        shape.createVersion(),
        properties,
        shape.stats(),
        some,  # viewText
        shape.comment(),
        shape.collation(),
        shape.unsupportedFeatures(),
        shape.tracksPartitionsInCatalog(),
        shape.schemaPreservesCase(),
        shape.ignoredProperties(),
        some,  # viewOriginalText
    )


def _captured_catalog_confs(properties: Any) -> list[str]:
    """The session's catalog and extension confs Spark captured into the view
    (``view.sqlConfig.*``): a session writing with delta-spark has ``DeltaCatalog`` as its
    session catalog, and a reader without Delta's jars that applied the captured conf could not
    resolve the view at all. The view reads Parquet files only: it needs neither."""
    keys = []
    found = properties.keysIterator()
    while found.hasNext():
        key = str(found.next())
        if key.startswith(("view.sqlConfig.spark.sql.catalog", "view.sqlConfig.spark.sql.extensions")):
            keys.append(key)
    return keys


def publish_views(
    spark: SparkSession,
    view: str,
    *,
    root: str,
    columns: Sequence[tuple[str, str]],
    head: SnapshotRecord,
    live: Sequence[SnapshotRecord],
) -> None:
    """Point ``view`` at ``head`` and ``view``_labels at the live labels (see the module)."""
    current, labels, left_out = views_sql(root, columns, head, live)
    if left_out:
        log.warning(
            "%s: %s%s leaves out the older labels %s: their text would pass the metastore's %s-character "
            "limit on a view (lower cdc.keep_labels, or bigger cdc.snapshot_file_size for fewer files)",
            head.table,
            view,
            LABELS_SUFFIX,
            ", ".join(left_out),
            VIEW_TEXT_LIMIT,
        )
    register_view(spark, view, columns, current)
    register_view(spark, view + LABELS_SUFFIX, columns, labels)
    log.info(
        "%s: views %s (Delta version %s, snapshot %s) and %s%s (%s label(s)) registered",
        head.table,
        view,
        head.table_version,
        head.ref,
        view,
        LABELS_SUFFIX,
        len(live),
    )
