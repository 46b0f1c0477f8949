"""What spark-submit is given at launch for a table (``SparkJob.launch_conf``): a job's jars
count on the driver only when they are on its class path from the start, so an Iceberg
table's commits and a Delta or Iceberg snapshot's catalog must be on the command line, not
only in the session the job builds."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers.tables import fresh_table
from tidemark.airflow.operators import TidemarkSparkSubmitOperator
from tidemark.jobs import SparkJob, merged_conf
from tidemark.settings import Settings
from tidemark.spark import class_archive

pytestmark = pytest.mark.unit


def _option(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, part in enumerate(command) if part == flag]


def test_an_iceberg_table_is_submitted_with_the_runtime_and_its_catalog(
    settings: Settings, tmp_path: Path
) -> None:
    config, own = fresh_table(settings, tmp_path, output__table_format="iceberg")
    command = SparkJob("seal", config.table, ["--run-id", "r1"]).command(own)
    (class_path,) = _option(command, "--driver-class-path")
    assert "iceberg-spark-runtime" in class_path
    confs = dict(c.split("=", 1) for c in _option(command, "--conf"))
    assert confs[f"spark.sql.catalog.{own.iceberg_catalog}"] == "org.apache.iceberg.spark.SparkCatalog"
    assert "iceberg-spark-runtime" in confs["spark.jars"]
    assert SparkJob("dump", config.table).launch_conf(own) == {}  # stages batches, commits no hour
    # the driver maps the class archive of its own class path (Iceberg's runtime on it), once
    own = replace(own, jvm_class_archive=str(tmp_path / "archives" / "spark-classes.jsa"))
    archive = class_archive(own, class_path)
    assert archive is not None and archive != own.class_archive
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"")
    command = SparkJob("seal", config.table, ["--run-id", "r1"]).command(own)
    (options,) = _option(command, "--driver-java-options")
    assert f"-XX:SharedArchiveFile={archive}" in options and options.count("SharedArchiveFile") == 1


def test_a_hive_table_is_submitted_without_extra_jars(settings: Settings, tmp_path: Path) -> None:
    config, own = fresh_table(settings, tmp_path)
    assert SparkJob("seal", config.table).launch_conf(own) == {}


def test_list_confs_are_joined_once_and_others_overridden() -> None:
    merged = merged_conf(
        {"spark.jars": "a.jar,b.jar", "spark.driver.extraClassPath": "a.jar", "x": "1"},
        {"spark.jars": "b.jar,c.jar", "spark.driver.extraClassPath": "c.jar", "x": "2"},
    )
    assert merged == {
        "spark.jars": "a.jar,b.jar,c.jar",
        "spark.driver.extraClassPath": "a.jar:c.jar",
        "x": "2",
    }


def test_an_iceberg_creation_without_a_spark_session_is_a_named_error(settings: Settings) -> None:
    """Outside a job (no Spark session in the process) no table is created: a named error."""
    probe = (
        "from tidemark.hourcommit.iceberg_java import JavaIceberg\n"
        "from tidemark.errors import IcebergRuntimeMissingError\n"
        "from tidemark.settings import Settings\n"
        "try:\n"
        "    JavaIceberg(Settings.from_env(), 'events').catalog\n"
        "except IcebergRuntimeMissingError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert "events: an Iceberg table is created by Iceberg's runtime for Spark" in done.stdout


def test_the_operator_reads_the_table_or_group_and_the_job_from_its_arguments(
    settings: Settings, tmp_path: Path
) -> None:
    """The DAG task computes the launch conf when it runs, from its application arguments: a
    table's seal gets the Iceberg runtime, a group's dump (``--group G --job dump``) none."""
    config, own = fresh_table(settings, tmp_path, output__table_format="iceberg")
    jobs = {
        "seal": SparkJob("seal", config.table, ["--run-id", "r1"]),
        "group dump": SparkJob.of_group("no_such_group", "dump", ["--run-id", "r1"]),
    }
    found = {}
    for what, job in jobs.items():
        operator = TidemarkSparkSubmitOperator(
            task_id=what.replace(" ", "_"), application=job.application(own), application_args=job.arguments
        )
        operator._add_launch_conf(own)
        found[what] = ("iceberg-spark-runtime" in (operator.driver_class_path or ""), operator.conf or {})
    assert found["seal"][0] and "spark.jars" in found["seal"][1]
    assert found["group dump"] == (False, {})


def test_a_job_is_read_back_from_the_arguments_it_is_submitted_with(settings: Settings) -> None:
    """The operator's launch conf and lineage read the job from the arguments
    ``SparkJob.arguments`` gave: the same job comes back; no table and no group, none."""
    for job in (
        SparkJob("seal", "events", ["--run-id", "r1"]),
        SparkJob.of_group("fleet", "dump", ["--run-id", "r1"]),
    ):
        assert SparkJob.from_arguments(job.application(settings), job.arguments) == job
    assert SparkJob.of_group("fleet", "seal", []).group_job == "seal"
    assert SparkJob("seal", "events").group_job == ""
    assert SparkJob.from_arguments("spark_jobs/seal.py", ["--run-id", "r1"]) is None
    assert SparkJob.from_arguments("spark_jobs/seal.py", ["--table"]) is None
