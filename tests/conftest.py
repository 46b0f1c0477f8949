"""Shared fixtures. Heavy parts (broker, Spark, Airflow DB) are session-scoped and real; every
test run gets its own TIDEMARK_HOME so it never touches the developer's .tidemark/."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tidemark.iceberg_catalog import open_catalog
from tidemark.jobs import reader_conf
from tidemark.settings import Settings
from tidemark.spark import build_session
from tidemark_dev.airflow_env import HIVE_METASTORE_POOL
from tidemark_dev.kafka import KafkaService
from tidemark_dev.net import free_port, free_port_block
from tidemark_dev.postgres import PostgresService, postgres_url
from tidemark_dev.s3 import PORTS, S3Service, s3_environment
from tidemark_dev.schema_registry import SchemaRegistryStandIn
from tidemark_dev.services import NoidaBrokerService, TansuService

pytest_plugins = ["tests.tiers", "pytester"]

# Airflow reads its config at import: give the test run its own home, no example DAGs. Each
# xdist worker gets its own (they inherit the controller's environment, and two workers on one
# SQLite metadata DB would lock each other out).
if os.environ.get("PYTEST_XDIST_WORKER") or "AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="tidemark-airflow-")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).resolve().parents[1] / "dags")
# Many short Spark JVMs (every job a test runs as its own process): C1 only and the serial GC
# start them about 13% faster; the jobs' results do not depend on the JIT.
os.environ.setdefault("TIDEMARK_JVM_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """The test run's own Airflow metadata DB (SQLite under the temp AIRFLOW_HOME)."""
    from airflow.models.pool import Pool
    from airflow.utils.db import initdb

    initdb()
    Pool.create_or_update_pool(HIVE_METASTORE_POOL, 1, "one Derby metastore client at a time", False)


@pytest.fixture(scope="session")
def tidemark_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh TIDEMARK_HOME for the whole run, exported so subprocesses (spark-submit,
    Airflow tasks) see it too."""
    home = tmp_path_factory.mktemp("tidemark_home")
    os.environ["TIDEMARK_HOME"] = str(home)
    return home


@pytest.fixture(scope="session")
def broker_port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def settings(tidemark_home: Path, broker_port: int) -> Settings:
    os.environ["TIDEMARK_KAFKA_BOOTSTRAP"] = f"127.0.0.1:{broker_port}"
    os.environ["TIDEMARK_POSTGRES_PORT"] = str(free_port())
    return Settings.from_env()


@pytest.fixture(scope="session")
def broker(settings: Settings) -> Iterator[str]:
    """A real tansu broker on its own port; yields the bootstrap servers."""

    service = TansuService(settings)
    service.start()
    try:
        yield settings.kafka_bootstrap
    finally:
        service.stop()


@pytest.fixture(scope="session")
def noida(settings: Settings) -> Iterator[Settings]:
    """A second, independent broker (noida-db's Kafka service) on its own port; yields
    settings pointing at it."""

    own = replace(settings, kafka_bootstrap=f"127.0.0.1:{free_port()}")
    service = NoidaBrokerService(own)
    service.start()
    try:
        yield own
    finally:
        service.stop()


@pytest.fixture(params=["tansu", "noida"])
def any_broker(request: pytest.FixtureRequest, settings: Settings) -> tuple[str, Settings]:
    """(bootstrap, settings) of each broker in turn: tests of the dump's broker-facing
    behaviour run against both."""
    if request.param == "tansu":
        return request.getfixturevalue("broker"), settings
    own: Settings = request.getfixturevalue("noida")
    return own.kafka_bootstrap, own


@pytest.fixture(scope="module")
def kafka(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The real Apache Kafka broker (KRaft, from jvm/pom.xml's jars: ``make jvm``), one per test
    module that needs it (two in the suite: its ~20 s start costs less than a JVM idling
    through the whole run on 2 cores), beside tansu: PLAINTEXT, SSL (mutual TLS) and SASL_SSL (SCRAM) listeners on four
    ports of its own (``tidemark_dev.kafka``). For the tests about the broker, security and
    exactly once; tansu stays the fast source of the others."""

    own = replace(
        settings,
        home=tmp_path_factory.mktemp("kafka_home"),
        kafka_bootstrap=f"127.0.0.1:{free_port_block(4)}",
    )
    service = KafkaService(own)
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest, settings: Settings) -> Iterator[object]:
    """Session-scoped local Spark with Hive support on the test run's own Derby metastore, with
    what reads every format by name (``jobs.reader_conf``): Iceberg's runtime on the run's own
    Iceberg catalog (Iceberg-format CDC snapshots MERGE in it) and delta-spark (Delta snapshots
    are registered and read as Delta tables); the jars must be on the class path from the
    JVM's start."""

    open_catalog(settings)  # the catalog's database and namespace: a reader's conf only names it
    session = build_session("tidemark-tests", settings, extra_conf=reader_conf(settings))
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def postgres(settings: Settings) -> Iterator[str]:
    """tidemark's own PostgreSQL cluster on a free port (the Makefile's test target installs
    the server and the JDBC driver where missing); yields its JDBC URL."""

    service = PostgresService(settings)
    service.start()
    try:
        yield postgres_url(settings)
    finally:
        service.stop()
        shutil.rmtree(service.data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def s3(settings: Settings) -> Iterator[str]:
    """A real S3 server (SeaweedFS) on its own ports, with a bucket; its endpoint and
    credentials exported as AWS_* for boto3 in this process and in subprocesses. Yields the
    bucket's URI."""
    import boto3

    own = replace(settings, s3_port=free_port_block(PORTS))
    service = S3Service(own)
    service.start()
    os.environ.update(s3_environment(own))
    boto3.client("s3").create_bucket(Bucket="lake")
    try:
        yield "s3://lake"
    finally:
        service.stop()


@pytest.fixture
def schema_registry() -> Iterator[str]:
    """The Schema Registry STAND-IN (tidemark_dev/schema_registry.py: no real registry installs
    here), serving Confluent's REST subset on 127.0.0.1 from a thread; yields its URL."""

    registry = SchemaRegistryStandIn().start()
    try:
        yield registry.url
    finally:
        registry.stop()
