"""Table files that cannot run, as one Airflow import error naming each file and its
problem; their tables have no DAGs, and every other table's DAGs load from the other DAG files
(tidemark.airflow.dags.tables_apart). Defines no DAG when every table file is fine."""

from __future__ import annotations

from tidemark.airflow.dags import raise_table_problems

raise_table_problems()
