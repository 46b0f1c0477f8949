"""A Delta snapshot registered in the metastore as a Delta table, read by name natively.

``<table>_snapshot`` is one metastore entry whose provider is ``delta`` and whose location is
the Delta table's directory (what ``CREATE TABLE ... USING delta LOCATION`` makes): Spark with
delta-spark reads its current version by name and a label's version with ``VERSION AS OF``;
Trino's Delta Lake connector on the same metastore reads it by name too. The entry holds no
schema and no label: Delta reads both from its log, so it is registered once and never
rewritten by a commit. A label is the Delta version its record names; every commit carries
the record in its ``userMetadata`` (``DESCRIBE HISTORY <table>_snapshot`` shows the label),
and ``tidemark status`` prints each label's version.

Registering needs delta-spark in the session (``DeltaCatalog`` as the session catalog): the
jobs of a Delta-snapshot table get it (``tidemark.jobs.table_session_conf``). Registration is
derived state, done under the table's snapshot lock after each commit, idempotent, and made
good by the next bootstrap or merge when it fails. It replaces the two SQL views that earlier
releases registered under these names (their text grew with every label until the metastore
refused it).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tidemark.delta_spark import CATALOG
from tidemark.errors import MergeError
from tidemark.java_errors import java_text
from tidemark.masking import exception_line
from tidemark.seal.metastore import DATABASE, qualified, quote_value
from tidemark.snapshot.snapshots import PARTITION_COLUMN
from tidemark.tablefs import hadoop_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# the views earlier releases registered: <table>_snapshot (current) and <table>_snapshot_labels
OLD_LABELS_VIEW_SUFFIX = "_labels"


def register_delta_table(spark: SparkSession, name: str, uri: str, *, table: str) -> str:
    """Make ``name`` the Delta table at ``uri`` in the metastore (``table``: the CDC table, for
    messages); returns what it did. A view of tidemark's earlier releases under the name is
    replaced; another table there is a MergeError (tidemark never drops a table it did not
    make)."""
    if spark.conf.get("spark.sql.catalog.spark_catalog", "") != CATALOG:
        raise MergeError(
            f"{table}: registering {name} as a Delta table needs delta-spark in the session "
            "(tidemark.delta_spark.delta_spark_conf, which the jobs of a Delta-snapshot table get)"
        )
    location = hadoop_uri(uri).rstrip("/")
    found = _catalog_table(spark, name)  # one lookup per name and call
    labels = name + OLD_LABELS_VIEW_SUFFIX
    entries = {name: found, labels: _catalog_table(spark, labels)}
    dropped = [view for view, entry in entries.items() if _drop_if_old_view(spark, view, entry)]
    if found is not None and name not in dropped:
        kind, provider, where = _described(found)
        if kind != "VIEW" and provider == "delta" and _same_place(where, location):
            return "registered" if not dropped else _replaced(table, name, dropped)
        what = "a view" if kind == "VIEW" else f"a {provider or 'Hive'} table at {where}"
        raise MergeError(
            f"{table}: the metastore's {DATABASE}.{name} is {what}, not the Delta table at {location}: "
            f"drop or rename it and merge again"
        )
    try:
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {qualified(name)} USING delta LOCATION {quote_value(location)}"
        )
    except Exception as exc:
        if _file_system_missing(exc):
            raise MergeError(
                f"{table}: registering {DATABASE}.{name} failed: {exception_line(exc)}. Spark registers a "
                f"Delta table through a placeholder directory under the database's location "
                f"({_database_location(spark)}), so the job needs that file system too (s3a: "
                "hadoop-aws on its class path), or the database must be located where the job reaches"
            ) from exc
        raise
    log.info(
        "%s: %s.%s registered in the metastore as the Delta table at %s", table, DATABASE, name, location
    )
    return _replaced(table, name, dropped) if dropped else "registered now"


def _file_system_missing(exc: Exception) -> bool:
    """A Hadoop file system the job lacks (no class for the scheme of a location)."""
    text = java_text(exc)
    return "No FileSystem for scheme" in text or ("ClassNotFoundException" in text and "FileSystem" in text)


def _database_location(spark: SparkSession) -> str:
    try:
        return str(spark.catalog.getDatabase(DATABASE).locationUri)
    except Exception:  # the message stands without it
        return "unknown"


def _replaced(table: str, name: str, dropped: list[str]) -> str:
    log.warning(
        "%s: the views %s of an earlier tidemark are dropped: %s.%s is the Delta table now "
        "(a label is read with VERSION AS OF its Delta version)",
        table,
        ", ".join(dropped),
        DATABASE,
        name,
    )
    return f"registered, views {', '.join(dropped)} replaced"


def _same_place(a: str, b: str) -> bool:
    """Whether two locations name one directory (the metastore keeps ``file:/x`` for ``/x``)."""

    def plain(uri: str) -> str:
        for prefix in ("file://", "file:"):
            if uri.startswith(prefix):
                uri = uri[len(prefix) :]
                break
        return uri.rstrip("/")

    return plain(a) == plain(b)


def _drop_if_old_view(spark: SparkSession, view: str, entry: Any) -> bool:
    """Drop ``entry`` (the metastore's ``view``) if it is a view of tidemark's earlier releases:
    its query names the label column ``snapshot_dt`` (every one of theirs did); others stay."""
    if entry is None or str(entry.tableType().name()) != "VIEW":
        return False
    text = entry.viewText()
    if not (text.isDefined() and PARTITION_COLUMN in str(text.get())):
        return False
    spark.sql(f"DROP VIEW IF EXISTS {qualified(view)}")
    return True


def _catalog_table(spark: SparkSession, name: str) -> Any:
    """The metastore's entry for ``name`` (Spark's CatalogTable), or None. Read from the session
    catalog without resolving it: an old view over files that are gone must not fail here."""
    jvm: Any = spark._jvm
    catalog = spark._jsparkSession.sessionState().catalog()
    identifier = jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(name, jvm.scala.Some.apply(DATABASE))
    return catalog.getTableMetadata(identifier) if catalog.tableExists(identifier) else None


def _described(entry: Any) -> tuple[str, str, str]:
    """(type, provider, location) of a metastore entry."""
    provider = entry.provider()
    location = entry.storage().locationUri()
    return (
        str(entry.tableType().name()),
        str(provider.get()).lower() if provider.isDefined() else "",
        str(location.get().toString()) if location.isDefined() else "",
    )
