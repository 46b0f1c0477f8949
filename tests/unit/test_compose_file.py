"""docker-compose.yaml keeps the production topology's promises (the Compose schema itself is
checked by `make lint`): the services the design names, loopback-only ports, healthchecks
behind every dependency, and secrets only from .env."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
ONE_SHOT = {"airflow-init", "metastore-init", "kafka-tls", "kafka-users"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yaml").read_text()))


def test_the_topology_has_every_service_the_design_names(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {
        "kafka",
        "postgres",
        "s3",
        "metastore",
        "spark-master",
        "spark-worker-1",
        "spark-worker-2",
        "airflow-init",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
    } <= set(services)
    assert "broker,controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft
    assert services["airflow-scheduler"]["image"].startswith("tidemark-airflow:3.3")
    assert (
        services["spark-master"]["environment"]["TIDEMARK_HIVE_METASTORE_URIS"] == "thrift://metastore:9083"
    )


def test_ports_are_on_loopback_and_every_dependency_waits_for_health(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
        if name not in ONE_SHOT:
            assert "healthcheck" in service or name.startswith("spark-worker"), name
        for dependency, condition in service.get("depends_on", {}).items():
            expected = "service_completed_successfully" if dependency in ONE_SHOT else "service_healthy"
            assert condition == {"condition": expected}, (name, dependency)


def test_secrets_come_from_the_env_file_and_the_example_names_them_all() -> None:
    text = (ROOT / "docker-compose.yaml").read_text()
    required = set(re.findall(r"\$\{([A-Z0-9_]+):\?", text))
    example = {
        line.split("=", 1)[0]
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert required and required <= example, required - example
    # PASSWORD, SECRET or a _KEY word (not KEYSTORE: a keystore's type or location is no secret)
    secrets = re.findall(r"^\s*(\w*(?:PASSWORD|SECRET|_KEY(?=_|:))\w*):\s*(.+)$", text, re.MULTILINE)
    assert secrets
    for name, value in secrets:
        assert value.startswith("${") or name.endswith("_FILE"), (
            f"{name}: a literal secret in docker-compose.yaml"
        )


def test_the_images_carry_the_hadoop_aws_of_sparks_own_hadoop(compose: dict[str, Any]) -> None:
    """s3a must match the Hadoop inside pyspark (a mix fails at class loading, or worse, later):
    both images fetch hadoop-aws of that version, and the jobs are told where it is."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    (client,) = jars.glob("hadoop-client-api-*.jar")
    hadoop = client.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    bundles = set()
    for image in ("spark.Dockerfile", "airflow.Dockerfile"):
        text = (ROOT / "docker" / image).read_text()
        assert f"ARG HADOOP_AWS={hadoop}\n" in text, image
        assert "/opt/tidemark/s3a-jars" in text, image
        bundles |= set(re.findall(r"ARG AWS_SDK_BUNDLE=(\S+)", text))
    assert len(bundles) == 1, bundles
    (bundle,) = bundles
    named = compose["x-tidemark-env"]["TIDEMARK_S3A_JARS"].split(",")
    assert named == [
        f"/opt/tidemark/s3a-jars/hadoop-aws-{hadoop}.jar",
        f"/opt/tidemark/s3a-jars/bundle-{bundle}.jar",
    ]
    assert "/opt/tidemark/s3a-jars/*" in (ROOT / "docker" / "metastore.sh").read_text()


def test_the_cluster_runs_the_jvm_artifacts_the_pom_pins() -> None:
    """One set of versions: jvm/pom.xml (what `make jvm` fetches, the tests run) and the
    production images (docker-compose's Kafka, the images' hadoop-aws) name the same."""

    pom = ET.parse(ROOT / "jvm" / "pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    kafka = pom.findtext("m:properties/m:kafka.version", namespaces=ns)
    hadoop = pom.findtext("m:properties/m:hadoop.version", namespaces=ns)
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{kafka}"
    for image in ("spark.Dockerfile", "airflow.Dockerfile"):
        assert f"ARG HADOOP_AWS={hadoop}\n" in (ROOT / "docker" / image).read_text(), image


def test_no_service_waits_on_itself_through_its_dependencies(compose: dict[str, Any]) -> None:
    """`docker compose up` refuses a dependency cycle (a one-shot service that needs the broker
    the broker waits for, say)."""
    needs = {name: set(service.get("depends_on") or {}) for name, service in compose["services"].items()}

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, " -> ".join((*path, name))
        for dependency in needs.get(name, ()):
            visit(dependency, (*path, name))

    for name in needs:
        visit(name, ())
