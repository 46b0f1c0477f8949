"""Airflow ingest DAGs, one per table in conf/tables/ (built by tidemark.dag_factory)."""

from __future__ import annotations

from tidemark.dag_factory import ingest_dags

globals().update(ingest_dags())
