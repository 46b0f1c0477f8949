"""Apache Kafka as a local service (``tidemark-dev services start kafka``): the real broker, single
node KRaft, from jvm/pom.xml's ``kafka`` jars (``make jvm``), data under ``$TIDEMARK_HOME/kafka``.

Listeners, all on 127.0.0.1, from the port of ``TIDEMARK_KAFKA_BOOTSTRAP`` (p):

| port | listener | who may connect |
|---|---|---|
| p | PLAINTEXT | anyone (tansu's place: the tests and the demo that are not about security) |
| p+1 | SSL | clients with a certificate of the test CA (mutual TLS) |
| p+2 | SASL_SSL | SCRAM-SHA-512 or SCRAM-SHA-256 users, over TLS |
| p+3 | CONTROLLER | the broker's own KRaft controller |

The test CA, the broker's certificate (SAN 127.0.0.1, localhost) and a client certificate are
made at the first start (``cryptography``) under ``kafka/tls``; the SCRAM user ``admin`` is
created when the storage is formatted, others through the admin API (:meth:`add_user`). A
restart keeps the data (unlike tansu's memory storage). Short retention and cleaner checks
make retention and compaction observable in tests.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import uuid
from dataclasses import dataclass
from typing import Any

from tidemark.errors import ServiceError
from tidemark.jvm_jars import require_jars
from tidemark.settings import Settings
from tidemark_dev.services import Service, java_binary, kafka_answers
from tidemark_dev.tls import TestCertificates

MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
ADMIN = "admin"


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in unpadded base64url (what ``random-uuid`` prints)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass(frozen=True)
class KafkaListeners:
    plaintext: str
    ssl: str
    sasl_ssl: str
    controller: str


class KafkaService(Service):
    """The Apache Kafka broker (see the module doc)."""

    name = "broker"  # the default local broker of `make up`, `make demo` and `services start`
    start_timeout = 90.0

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.root = settings.home / "kafka"
        self.data_dir = self.root / "data"
        self.properties_file = self.root / "server.properties"
        self.secrets_file = self.root / "admin.json"
        self.tls = TestCertificates(self.root / "tls")

    # -- addresses and credentials -------------------------------------------------------
    @property
    def listeners(self) -> KafkaListeners:
        p = self.settings.broker_port
        return KafkaListeners(*(f"127.0.0.1:{p + i}" for i in range(4)))

    def address(self) -> str:
        return self.listeners.plaintext

    def answers(self) -> bool:
        return kafka_answers(self.listeners.plaintext, timeout=2.0)

    def admin_password(self) -> str:
        """The SCRAM password of ``admin`` (made at the first format, kept 0600)."""
        if not self.secrets_file.is_file():
            self.root.mkdir(parents=True, exist_ok=True)
            self.secrets_file.write_text(json.dumps({"admin": secrets.token_urlsafe(18)}))
            self.secrets_file.chmod(0o600)
        return str(json.loads(self.secrets_file.read_text())["admin"])

    def sasl_properties(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """librdkafka properties of a SCRAM user on the SASL_SSL listener."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(self.tls.ca_file),
        }

    def mtls_properties(self) -> dict[str, str]:
        """librdkafka properties of the test CA's client certificate on the SSL listener."""
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.tls.ca_file),
            "ssl.certificate.location": str(self.tls.client_cert_file),
            "ssl.key.location": str(self.tls.client_key_file),
        }

    def add_user(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        """Create (or change) a SCRAM user through the admin API (PLAINTEXT listener)."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        kind = ScramMechanism.SCRAM_SHA_512 if mechanism == "SCRAM-SHA-512" else ScramMechanism.SCRAM_SHA_256
        admin = AdminClient({"bootstrap.servers": self.listeners.plaintext})
        upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(kind, 8192), password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(30)

    # -- start ---------------------------------------------------------------------------
    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.tls.ensure(hosts=("127.0.0.1", "localhost"))
        self.properties_file.write_text(self._properties())
        (self.root / "log4j2.properties").write_text(LOG4J2)
        if not (self.data_dir / "meta.properties").is_file():
            self._format()

    def command(self) -> list[str]:
        return [
            java_binary("kafka"),
            "-Xms128m",
            "-Xmx512m",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}",
            "-cp",
            self._class_path(),
            "kafka.Kafka",
            str(self.properties_file),
        ]

    def _class_path(self) -> str:
        return ":".join(require_jars("kafka"))

    def _format(self, cluster: str | None = None) -> None:
        """``kafka-storage format``: the cluster id, and the admin's SCRAM credentials.

        The id goes as ``--cluster-id=<id>``: a base64url id starts with ``-`` once in 64, and
        as a separate argument the tool's parser takes it for an option."""
        cluster = cluster or new_cluster_id()
        password = self.admin_password()
        scram = [f"--add-scram={m}=[name={ADMIN},password={password}]" for m in MECHANISMS]
        done = subprocess.run(
            [
                java_binary("kafka"),
                "-cp",
                self._class_path(),
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={cluster}",
                f"--config={self.properties_file}",
                *scram,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise ServiceError(
                f"kafka: formatting {self.data_dir} failed: {(done.stderr or done.stdout)[-1500:]}".replace(
                    password, "***"
                )
            )

    def _properties(self) -> str:
        listen = self.listeners
        values: dict[str, Any] = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@{listen.controller}",
            "listeners": (
                f"PLAINTEXT://{listen.plaintext},SSL://{listen.ssl},SASL_SSL://{listen.sasl_ssl},"
                f"CONTROLLER://{listen.controller}"
            ),
            "advertised.listeners": f"PLAINTEXT://{listen.plaintext},SSL://{listen.ssl},SASL_SSL://{listen.sasl_ssl}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": 1,
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 4,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 4,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": "false",
            # the generators' oversized dirty records (16 MiB, as their producers allow): the
            # dump must quarantine them, so the broker must take them
            "message.max.bytes": 16 * 1024 * 1024,
            "replica.fetch.max.bytes": 16 * 1024 * 1024,
            # retention and compaction act within seconds when a topic asks for it
            "log.retention.check.interval.ms": 1000,
            "log.segment.delete.delay.ms": 0,
            "log.cleaner.backoff.ms": 500,
            "log.initial.task.delay.ms": 0,
            "file.delete.delay.ms": 0,
            # TLS: PEM files of the test CA; the SSL listener requires a client certificate
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls.broker_pem_file),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca_file),
            "ssl.endpoint.identification.algorithm": "",
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            **{
                f"listener.name.sasl_ssl.{m.lower()}.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
                for m in MECHANISMS
            },
        }
        return "".join(f"{k}={v}\n" for k, v in values.items())


LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.auth.name = org.apache.kafka.common.network.Selector
logger.auth.level = INFO
"""
