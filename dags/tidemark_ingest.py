"""Airflow ingest DAGs, one per table in conf/tables/ (built by tidemark.airflow.dags)."""

from __future__ import annotations

from tidemark.airflow.dags import all_dags

globals().update(all_dags())
