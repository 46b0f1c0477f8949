from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pyspark  # noqa: TID253
import pytest

import tidemark
from tidemark.catalog import load_tables
from tidemark.config.columns import data_fields
from tidemark.schema import arrow_schema_of, to_struct
from tidemark.settings import Settings

pytestmark = pytest.mark.integration


def test_python_side_matches_loaded_spark_jars(spark: Any) -> None:
    """The pyspark/pyspark-client trap: both must be one version, and match the JVM's jars."""
    jvm = spark.sparkContext._jvm
    jar = Path(
        jvm.org.apache.spark.SparkContext.getOrCreate()
        .getClass()
        .getProtectionDomain()
        .getCodeSource()
        .getLocation()
        .getPath()
    )
    assert spark.version == pyspark.__version__
    assert jar.name == f"spark-core_2.13-{pyspark.__version__}.jar"

    assert version("pyspark") == version("pyspark-client") == pyspark.__version__


def test_hive_table_lands_in_the_test_warehouse(spark: Any, settings: Settings) -> None:
    spark.sql("CREATE TABLE IF NOT EXISTS smoke_hive (id BIGINT, name STRING) STORED AS PARQUET")
    spark.sql("INSERT OVERWRITE TABLE smoke_hive VALUES (1, 'a'), (2, 'b')")
    assert sorted(r.id for r in spark.table("smoke_hive").collect()) == [1, 2]
    location = spark.sql("DESCRIBE FORMATTED smoke_hive").where("col_name = 'Location'").first().data_type
    assert location.startswith(f"file:{settings.warehouse}")
    assert (settings.metastore_dir / "service.properties").exists()  # Derby under TIDEMARK_HOME
    assert spark.catalog.tableExists("smoke_hive")


def test_executors_run_the_venv_python_and_import_tidemark(spark: Any, settings: Settings) -> None:
    def probe(_: Any) -> list[str]:
        return [sys.executable, tidemark.__file__]

    executable, module = spark.sparkContext.parallelize([0], 1).mapPartitions(probe).collect()
    assert executable == settings.python
    assert module.endswith("tidemark/__init__.py")


def test_schema_parser_agrees_with_spark(spark: Any) -> None:
    """Our JVM-free type parser must give what Spark's own DDL parser gives."""
    from pyspark.sql.types import StructType

    for table in load_tables():
        ours = to_struct(table.schema_columns)
        ddl = ", ".join(
            f"{c.name} {c.type.ddl()}" + ("" if c.nullable else " NOT NULL") for c in table.schema_columns
        )
        theirs = (
            StructType.fromDDL(ddl)
            if hasattr(StructType, "fromDDL")
            else spark.createDataFrame([], ddl).schema
        )
        assert ours == theirs, table.table


def test_the_hours_arrow_schema_without_a_jvm_is_the_one_spark_hands_a_task(spark: Any) -> None:
    """The seal compacts small hours in pyarrow without starting Spark: the schema it writes
    (``schema.arrow_schema_of``) must be the one Spark's DDL parser and Arrow conversion give."""
    from pyspark.sql.pandas.types import to_arrow_schema

    zoo = [("at", "timestamp"), ("local_at", "timestamp_ntz"), ("m", "map<string,array<decimal(9,3)>>")]
    for fields in [*(data_fields(t) for t in load_tables()), zoo]:
        ddl = ", ".join(f"`{n}` {t}" for n, t in fields)
        theirs = to_arrow_schema(spark.createDataFrame([], ddl).schema)
        assert arrow_schema_of(fields) == theirs, ddl
