"""The local services by name, as `tidemark-dev services start|stop|status NAME` takes them."""

from __future__ import annotations

import functools
from collections.abc import Callable

from tidemark.errors import ServiceError
from tidemark.settings import Settings
from tidemark_dev.cluster import SparkMasterService, SparkWorkerService
from tidemark_dev.derby_metastore import DerbyMetastoreService
from tidemark_dev.iceberg_rest import IcebergRestService
from tidemark_dev.kafka import KafkaService
from tidemark_dev.postgres import MetastoreService, PostgresService
from tidemark_dev.s3 import S3Service
from tidemark_dev.services import AirflowService, NoidaBrokerService, Service, TansuService

SERVICES: dict[str, Callable[[Settings], Service]] = {
    # Apache Kafka (KRaft, data kept across restarts): PLAINTEXT on TIDEMARK_KAFKA_BOOTSTRAP's port,
    # SSL, SASL_SSL and its controller on the next three
    "broker": KafkaService,
    # the Hive metastore over the home's Derby database (what `make up` runs): every process of
    # the home finds it while it runs; before Airflow, whose metastore pool it widens
    "derby-metastore": DerbyMetastoreService,
    "airflow": AirflowService,
    "postgres": PostgresService,
    "metastore": MetastoreService,  # on PostgreSQL, after postgres: its database
    "s3": S3Service,
    # Iceberg's REST catalog (TIDEMARK_ICEBERG_CATALOG_URI=http://127.0.0.1:<TIDEMARK_ICEBERG_REST_PORT>)
    "iceberg-rest": IcebergRestService,
    # lighter brokers on the same port, instead of "broker", not beside it: tansu (memory storage,
    # a restart loses the topics) and noida-db
    "tansu": TansuService,
    "noida": NoidaBrokerService,
    # a standalone Spark cluster (TIDEMARK_SPARK_MASTER=spark://127.0.0.1:<TIDEMARK_SPARK_PORT>)
    "spark-master": SparkMasterService,
    "spark-worker-1": functools.partial(SparkWorkerService, index=1),
    "spark-worker-2": functools.partial(SparkWorkerService, index=2),
}
ALIASES = {"kafka": "broker"}  # the name the broker had while tansu was the default
ON_DEMAND = (
    "metastore",  # on derby-metastore's port: instead of it
    "tansu",
    "noida",
    "iceberg-rest",
    "spark-master",
    "spark-worker-1",
    "spark-worker-2",
)  # not part of "all"


def resolve(names: list[str], *, every: bool = False) -> list[str]:
    """Expand ``all`` (``every``: on-demand services too, as a stop wants) and aliases, check
    names; start order is broker first."""
    if not names:
        return ["broker"]
    if "all" in names and every:
        return list(SERVICES)
    if "all" in names:  # noida is the alternative broker, on the broker's port; the cluster is heavy
        return [n for n in SERVICES if n not in ON_DEMAND]
    names = [ALIASES.get(n, n) for n in names]
    unknown = [n for n in names if n not in SERVICES]
    if unknown:
        raise ServiceError(f"unknown service(s) {', '.join(unknown)}; expected: {', '.join(SERVICES)}, all")
    return [n for n in SERVICES if n in names]
