"""The Iceberg catalog kinds as pure units: which kind a URI chooses, the properties each
client gets (secrets off the spark-submit command line, out of Trino's file), and the named
errors of a refused credential or a silent REST catalog, the secret masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.tables import fresh_table
from tidemark.errors import ConfigError, IcebergCatalogAuthError, IcebergCatalogUnavailableError
from tidemark.iceberg_catalog import catalog_kind, secret_conf_keys, spark_catalog_conf
from tidemark.iceberg_catalog_kind import SqlCatalogKind
from tidemark.iceberg_rest import RestCatalogKind
from tidemark.jobs import SparkJob, tables_session_conf
from tidemark.settings import Settings

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-value"


def settings_of(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({"TIDEMARK_HOME": str(tmp_path), **env})


def rest(tmp_path: Path, **env: str) -> Settings:
    return settings_of(
        tmp_path,
        TIDEMARK_ICEBERG_CATALOG_URI="https://catalog.example.com/api/catalog/",
        TIDEMARK_ICEBERG_CATALOG_CREDENTIAL=f"tidemark:{SECRET}",
        **env,
    )


def test_the_uri_chooses_the_kind(tmp_path: Path) -> None:
    assert isinstance(catalog_kind(settings_of(tmp_path)), SqlCatalogKind)
    pg = settings_of(tmp_path, TIDEMARK_ICEBERG_CATALOG_URI="postgresql+pg8000://u:p@db:5432/lake")
    assert catalog_kind(pg).java_properties()["uri"] == "jdbc:postgresql://db:5432/lake"
    assert isinstance(catalog_kind(rest(tmp_path)), RestCatalogKind)
    with pytest.raises(ConfigError, match="http"):
        catalog_kind(settings_of(tmp_path, TIDEMARK_ICEBERG_CATALOG_URI="mysql://db/lake")).java_properties()


def test_a_rest_catalog_s_properties_for_both_clients(tmp_path: Path) -> None:
    settings = rest(
        tmp_path,
        TIDEMARK_ICEBERG_CATALOG_PROPERTIES='{"warehouse": "lake", "scope": "PRINCIPAL_ROLE:ALL", '
        '"header.X-Iceberg-Access-Delegation": "vended-credentials"}',
        TIDEMARK_ICEBERG_CATALOG_TIMEOUT_S="7.5",
    )
    java = catalog_kind(settings).java_properties()
    assert java == {
        "type": "rest",
        "io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
        "http-client.type": "urlconnection",
        "uri": "https://catalog.example.com/api/catalog",
        "warehouse": "lake",
        "scope": "PRINCIPAL_ROLE:ALL",
        "header.X-Iceberg-Access-Delegation": "vended-credentials",
        "credential": f"tidemark:{SECRET}",
        "oauth2-server-uri": "https://catalog.example.com/api/catalog/v1/oauth/tokens",
        "rest.client.connection-timeout-ms": "7500",
        "rest.client.socket-timeout-ms": "7500",
    }
    token = settings_of(
        tmp_path, TIDEMARK_ICEBERG_CATALOG_URI="http://127.0.0.1:8181", TIDEMARK_ICEBERG_CATALOG_TOKEN="tok"
    )
    assert catalog_kind(token).java_properties()["token"] == "tok"
    assert "oauth2-server-uri" not in catalog_kind(token).java_properties()


def test_secrets_stay_off_the_command_line_and_out_of_trino_s_file(tmp_path: Path) -> None:
    settings = rest(tmp_path)
    conf = {k: v for k, v in spark_catalog_conf(settings).items() if k.startswith("spark.sql.catalog")}
    assert conf["spark.sql.catalog.iceberg.credential"] == f"tidemark:{SECRET}"  # in-process only
    assert secret_conf_keys(settings) == {
        "spark.sql.catalog.iceberg.credential",
        "spark.sql.catalog.iceberg.token",
    }
    assert "credential" in spark_catalog_conf(settings)["spark.redaction.regex"]  # Spark's UI hides it
    trino = catalog_kind(settings).trino_properties()
    assert SECRET not in "".join(trino.values())
    assert trino["iceberg.rest-catalog.oauth2.credential"] == "${ENV:TIDEMARK_ICEBERG_CATALOG_CREDENTIAL}"
    assert trino["iceberg.rest-catalog.security"] == "OAUTH2"
    sql = settings_of(tmp_path, TIDEMARK_ICEBERG_CATALOG_URI="postgresql+pg8000://u:pw@db/lake")
    assert secret_conf_keys(sql) == {"spark.sql.catalog.iceberg.jdbc.password"}
    assert SECRET not in repr(settings)


class OAuthError(Exception):
    """pyiceberg's name for a refused OAuth2 exchange (matched by name, as the kind does)."""


class ReadTimeout(Exception):
    """requests' name for a read that timed out."""


def test_refusals_and_silences_are_named_and_the_secret_masked(tmp_path: Path) -> None:
    kind = RestCatalogKind(rest(tmp_path))
    refused = kind.named(OAuthError(f"invalid_client: bad secret {SECRET}"), "opening the catalog")
    assert isinstance(refused, IcebergCatalogAuthError)
    assert SECRET not in str(refused) and "client 'tidemark', secret ***" in str(refused)
    assert "TIDEMARK_ICEBERG_CATALOG_CREDENTIAL" in str(refused)
    silent = kind.named(ReadTimeout("read timed out"), "committing to t")
    assert isinstance(silent, IcebergCatalogUnavailableError) and "did not answer while committing" in str(
        silent
    )
    other = ValueError("something else")
    assert kind.named(other, "x") is other
    assert SqlCatalogKind(settings_of(tmp_path)).named(other, "x") is other


def test_bad_catalog_settings_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as bad:
        settings_of(
            tmp_path, TIDEMARK_ICEBERG_CATALOG_PROPERTIES="[1]", TIDEMARK_ICEBERG_CATALOG_TIMEOUT_S="0"
        )
    assert "TIDEMARK_ICEBERG_CATALOG_PROPERTIES: expected a JSON object" in str(bad.value)
    assert "TIDEMARK_ICEBERG_CATALOG_TIMEOUT_S: expected a number of seconds > 0" in str(bad.value)


def test_a_job_s_spark_submit_command_carries_no_catalog_secret(tmp_path: Path) -> None:
    config, settings = fresh_table(rest(tmp_path), tmp_path, output__table_format="iceberg")
    command = " ".join(SparkJob("seal", config.table, ["--run-id", "r"]).command(settings))
    assert "spark.sql.catalog.iceberg.type=rest" in command and SECRET not in command
    in_process = tables_session_conf([config], settings, job="seal")  # the job's own session: whole
    assert in_process["spark.sql.catalog.iceberg.credential"] == f"tidemark:{SECRET}"
