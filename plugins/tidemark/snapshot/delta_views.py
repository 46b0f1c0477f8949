"""A Delta snapshot readable by name from Spark SQL through the metastore, with no Delta jars.

Why views. Spark without delta-spark, Hive and Trino's Hive connector read a Parquet table as
every file under its location, and a Delta table's directory holds the files of every
version: read that way, it would double rows. A Delta version is a list of files, and Spark
SQL can name files (``parquet.`<file>```), so after every commit tidemark registers two
persistent views in the metastore, recomputed from the snapshot log (each record names its
Delta version's files), under the table's snapshot lock:

- ``<table>_snapshot``: the current version (the Delta table's head), with the label it
  holds in ``snapshot_dt``;
- ``<table>_snapshot_labels``: every live label, one per ``snapshot_dt`` value, so
  ``SELECT ... FROM <table>_snapshot_labels WHERE snapshot_dt = 'L'`` is label ``L`` (the
  same query as a Parquet-format ``<table>_snapshot``); Spark prunes the other labels' files
  from the plan, but resolving the view reads one footer per file of every live label.

Each column is cast to the table's type, so a view has the YAML's schema whatever the writer
chose. The views are derived state: a job that dies before refreshing them is made good by
the next bootstrap or merge of the table (its recovery or its "already done" path refreshes
them too). Engines that read Delta itself (delta-spark, Trino's Delta Lake connector, Hive's
Delta connector) read the table's location directly: docs/snapshots.md lists what each reads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tidemark.seal.metastore import qualified, quote_identifier, quote_value
from tidemark.snapshot.snapshots import PARTITION_COLUMN, SnapshotRecord
from tidemark.tablefs import hadoop_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

LABELS_SUFFIX = "_labels"


def version_sql(root: str, columns: Sequence[tuple[str, str]], record: SnapshotRecord) -> str:
    """The rows of ``record``'s Delta version: one SELECT per file of it (Spark SQL takes one
    path per ``parquet.`...```), cast to the table's types, its label as ``snapshot_dt``."""
    label = f"{quote_value(record.label)} AS {quote_identifier(PARTITION_COLUMN)}"
    if not record.files:  # an empty version: no rows, the same columns
        nulls = ", ".join(f"CAST(NULL AS {t}) AS {quote_identifier(n)}" for n, t in columns)
        return f"SELECT {nulls}, {label} WHERE false"
    cast = ", ".join(f"CAST({quote_identifier(n)} AS {t}) AS {quote_identifier(n)}" for n, t in columns)
    return " UNION ALL ".join(
        f"SELECT {cast}, {label} FROM parquet.{quote_identifier(hadoop_uri(f'{root}/{name}'))}"
        for name in record.files
    )


def views_sql(
    view: str,
    root: str,
    columns: Sequence[tuple[str, str]],
    head: SnapshotRecord,
    live: Sequence[SnapshotRecord],
) -> list[str]:
    """CREATE OR REPLACE VIEW statements of the current version and of every live label."""
    labels = sorted(live, key=lambda r: r.delta_version)
    return [
        f"CREATE OR REPLACE VIEW {qualified(view)} AS {version_sql(root, columns, head)}",
        f"CREATE OR REPLACE VIEW {qualified(view + LABELS_SUFFIX)} AS "
        + " UNION ALL ".join(version_sql(root, columns, r) for r in labels),
    ]


def publish_views(
    spark: SparkSession,
    view: str,
    *,
    root: str,
    columns: Sequence[tuple[str, str]],
    head: SnapshotRecord,
    live: Sequence[SnapshotRecord],
) -> None:
    """Point ``view`` at ``head`` and ``view``_labels at every live label (see the module)."""
    for statement in views_sql(view, root, columns, head, live):
        spark.sql(statement)
    log.info(
        "%s: views %s (Delta version %s, snapshot %s) and %s%s (%s label(s)) registered",
        head.table,
        view,
        head.delta_version,
        head.ref,
        view,
        LABELS_SUFFIX,
        len(live),
    )
