"""Airflow DAGs of the tables in the shard this file is named for: each table in conf/tables/
has its DAGs in exactly one of the tidemark_tables_<0..7>.py files, chosen by a stable hash
of its name (tidemark.airflow.dags.shard_of), so that no file parses for longer than
Airflow's dagbag_import_timeout however many tables there are."""

from __future__ import annotations

from tidemark.airflow.dags import shard_dags

globals().update(shard_dags(__file__))
