"""tidemark: land message-queue data in Hive-partitioned lake tables, exactly once, by event time.

The package lives under ``plugins/`` so Airflow imports it, and is installed (editable) into the
venv so spark-submit jobs, Spark executors and the ``tidemark`` CLI import the very same code.
Import-time work is kept to nothing: DAG files import this package at parse time.
"""

from __future__ import annotations

__version__ = "0.1.0"
