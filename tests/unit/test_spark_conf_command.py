"""``tidemark spark-conf``: the conf a Spark SQL client of one's own reads tidemark's tables
by name with (the real shell reading a Delta snapshot with it:
tests/integration/test_delta_spark_engine.py)."""

from __future__ import annotations

import json
import shlex

import pytest

from tidemark.cli import main
from tidemark.cli_readers import render_conf
from tidemark.masking import MASK

pytestmark = pytest.mark.unit

CATALOG_URL = "postgresql+pg8000://reader:s3cret-pw@127.0.0.1:5432/postgres"


def _printed(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, str]:
    assert main(["spark-conf", "--format", "json", *argv]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_it_names_the_metastore_both_table_formats_and_masks_secrets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEMARK_ICEBERG_CATALOG_URI", CATALOG_URL)
    monkeypatch.setenv("TIDEMARK_HIVE_METASTORE_URIS", "thrift://127.0.0.1:9083")
    conf = _printed(capsys)
    assert conf["spark.hadoop.hive.metastore.uris"] == "thrift://127.0.0.1:9083"
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.sql.catalog.iceberg"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.iceberg.uri"] == "jdbc:postgresql://127.0.0.1:5432/postgres"
    assert set(conf["spark.sql.extensions"].split(",")) == {
        "io.delta.sql.DeltaSparkSessionExtension",
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    }
    assert "iceberg-spark-runtime" in conf["spark.driver.extraClassPath"]
    assert conf["spark.sql.catalog.iceberg.jdbc.password"] == MASK
    assert "s3cret-pw" not in json.dumps(conf)
    shown = _printed(capsys, "--show-secrets")
    assert shown["spark.sql.catalog.iceberg.jdbc.password"] == "s3cret-pw"


def test_the_formats_read_back_as_the_same_conf() -> None:
    conf = {"spark.a": "x y", "spark.b": "1,2"}
    lines = render_conf(conf, "properties").splitlines()
    assert dict(line.split(" ", 1) for line in lines) == conf  # spark-defaults.conf: key, space, value
    words = shlex.split(render_conf(conf, "args"))
    assert words[::2] == ["--conf", "--conf"]
    assert dict(w.split("=", 1) for w in words[1::2]) == conf
    assert json.loads(render_conf(conf, "json")) == conf
