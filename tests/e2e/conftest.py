"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tidemark.settings import Settings


@pytest.fixture
def dag_env(
    airflow_db: None, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """Its own TIDEMARK_HOME (the in-process Spark of other tests holds the shared Derby)."""
    home = tmp_path / "home"
    own = replace(settings, home=home, warehouse=str(home / "warehouse"))
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("TIDEMARK_HOME", str(home))
    monkeypatch.setenv("TIDEMARK_WAREHOUSE", own.warehouse)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    return own
