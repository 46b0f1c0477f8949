"""The ids of a table's DAGs, ``tidemark_<kind>_<table>``, and the table an id belongs to:
pure names, which the DAG builders, the operators' links and the web pages share (so the
pages, at the bottom of the package, import no DAG builder)."""

from __future__ import annotations

DAG_KINDS = ("ingest", "seal", "rebuild", "stream", "bootstrap", "merge", "maintain", "decide")


def dag_id_of(kind: str, table: str) -> str:
    """``tidemark_<kind>_<table>``: the id of one of a table's DAGs (see DAG_KINDS)."""
    return f"tidemark_{kind}_{table}"


def table_of_dag(dag_id: str) -> str | None:
    """The table a tidemark DAG id belongs to, else None."""
    for kind in DAG_KINDS:
        prefix = dag_id_of(kind, "")
        if dag_id.startswith(prefix):
            return dag_id.removeprefix(prefix)
    return None
