from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from tidemark.errors import ServiceError
from tidemark.settings import Settings
from tidemark_dev.kafka import KafkaService
from tidemark_dev.local import SERVICES, resolve
from tidemark_dev.net import free_port
from tidemark_dev.services import SPARK_DRIVER, TansuService, kafka_answers, stop_spark_drivers

pytestmark = pytest.mark.integration


@pytest.fixture
def own_broker(tmp_path: Path, settings: Settings) -> TansuService:
    """A second broker with its own home and port, so these tests stop only what they start."""
    port = free_port()
    return TansuService(replace(settings, home=tmp_path, kafka_bootstrap=f"127.0.0.1:{port}"))


def test_start_is_idempotent_status_answers_and_stop_leaves_nothing(own_broker: TansuService) -> None:
    assert not own_broker.status().running
    first = own_broker.start()
    assert first.running and first.answering and first.pid
    again = own_broker.start()
    assert again.pid == first.pid  # no second broker
    assert kafka_answers(own_broker.address())
    assert own_broker.log_file.exists() and own_broker.pid_file.exists()
    assert own_broker.stop() is True
    assert not psutil.pid_exists(first.pid) or psutil.Process(first.pid).status() == psutil.STATUS_ZOMBIE
    status = own_broker.status()
    assert not status.running and not status.answering
    assert own_broker.stop() is False


def test_produce_and_consume_round_trip(broker: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker})
    admin.create_topics([NewTopic("roundtrip", num_partitions=2, replication_factor=1)])["roundtrip"].result(
        10
    )
    producer = Producer({"bootstrap.servers": broker, "linger.ms": 0})
    for i in range(5):
        producer.produce("roundtrip", value=f"m{i}".encode(), partition=i % 2)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker, "group.id": "t", "enable.auto.commit": False})
    consumer.assign([TopicPartition("roundtrip", p, 0) for p in (0, 1)])
    seen: list[bytes] = []
    for _ in range(50):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen.append(msg.value() or b"")
        if len(seen) == 5:
            break
    consumer.close()
    assert sorted(seen) == [f"m{i}".encode() for i in range(5)]


def test_stale_pid_file_is_never_signalled(own_broker: TansuService) -> None:
    """A pid file pointing at somebody else's process (pid reuse) must not make us kill it."""
    own_broker.settings.run_dir.mkdir(parents=True, exist_ok=True)
    me = psutil.Process(os.getpid())
    own_broker.pid_file.write_text(json.dumps({"pid": me.pid, "started": me.create_time() - 1000}))
    assert not own_broker.status().running
    assert own_broker.stop() is False
    assert me.is_running()


def test_resolve_names() -> None:
    assert resolve([]) == ["broker"]
    assert resolve(["kafka"]) == ["broker"]  # the broker's old name
    assert SERVICES["broker"] is KafkaService and SERVICES["tansu"] is TansuService
    # make up's metastore over Derby; the one on PostgreSQL shares its port and is on demand
    assert resolve(["all"]) == ["broker", "derby-metastore", "airflow", "postgres", "s3"]
    assert resolve(["metastore", "postgres"]) == ["postgres", "metastore"]  # its database first
    assert resolve(["postgres", "broker"]) == ["broker", "postgres"]
    assert resolve(["airflow", "broker"]) == ["broker", "airflow"]

    with pytest.raises(ServiceError, match="unknown service"):
        resolve(["zookeeper"])


def test_stopping_airflow_stops_its_in_flight_spark_drivers_first(tmp_path: Path) -> None:
    """`make down`: a spark-submit JVM under the Airflow process tree is stopped at once (SIGTERM),
    not waited for; the rest of the tree is left to Airflow's own clean shutdown."""
    driver = f"import time; time.sleep(300)  # {SPARK_DRIVER}"
    tree = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {driver!r}]); time.sleep(300)",
        ]
    )
    try:
        root = psutil.Process(tree.pid)
        for _ in range(50):
            if root.children():
                break
            time.sleep(0.1)
        (child,) = root.children()
        assert stop_spark_drivers(root, timeout=10) == [child.pid]
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
        assert root.is_running()  # only the driver
    finally:
        tree.kill()
        tree.wait()
