"""OpenLineage from a dump, a seal and a rebuild on the real broker, Spark and metastore:
the lineage is read back from the records each run left, turned into the operator's
``OperatorLineage`` and emitted through OpenLineage's file transport (the one the Airflow
provider configures with ``[openlineage] transport = {"type": "file", ...}``); the events
in the file name the topic with its offset ranges, the Hive table and its partitions."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import at, fresh_table
from tidemark.airflow.operators import openlineage_of
from tidemark.ingest.dump import run_dump
from tidemark.observe.lineage import job_lineage, source_dataset
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration


def emit(path: Path, job: str, lineage: Any) -> None:
    from openlineage.client import OpenLineageClient
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
    from openlineage.client.transport.file import FileConfig, FileTransport

    client = OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=str(path), append=True)))
    client.emit(
        RunEvent(
            eventType=RunState.COMPLETE,
            eventTime=datetime.now(UTC).isoformat(),
            run=Run(runId=str(uuid.uuid4())),
            job=Job(namespace="tidemark-test", name=job),
            producer="tidemark-test",
            inputs=lineage.inputs,
            outputs=lineage.outputs,
        )
    )


def test_dump_seal_and_rebuild_report_topic_offsets_and_table_partitions(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path)
    topic = config.source.topic
    create_topic(broker, topic, 2)
    produce(
        broker,
        topic,
        records([(p, at(10, m)) for p in (0, 1) for m in (5, 35)] + [(0, at(11, 30)), (1, at(11, 30))]),
    )
    run_dump(spark, config, settings, "run-1", at(11, 40))
    run_seal(spark, config, settings, "run-1")
    run_rebuild(spark, config, settings, "rebuild-1", ["2026-11-22T10"])

    events = tmp_path / "lineage.jsonl"
    for job, run in (("dump", "run-1"), ("seal", "run-1"), ("rebuild", "rebuild-1")):
        emit(events, job, openlineage_of(job_lineage(job, config, settings, run)))
    assert job_lineage("dump", config, settings, "no-such-run").outputs == ()

    dump, seal, rebuild = (json.loads(line) for line in events.read_text().splitlines())
    table = f"default.{config.table}"
    hour10 = {"dt": "2026-11-22", "hr": "10"}
    hour11 = {"dt": "2026-11-22", "hr": "11"}

    (read,) = dump["inputs"]
    assert (read["namespace"], read["name"]) == (f"kafka://{settings.kafka_bootstrap}", topic)
    assert read["inputFacets"]["tidemark_kafkaOffsets"]["ranges"] == [
        {"partition": 0, "start": 0, "end": 3},
        {"partition": 1, "start": 0, "end": 3},
    ]
    (written,) = dump["outputs"]
    assert (written["namespace"], written["name"]) == ("hive://embedded", table)
    partitions = written["outputFacets"]["subset"]["outputCondition"]["partitions"]
    assert [p["dimensions"] for p in partitions] == [hour10, hour11]
    columns = [f["name"] for f in written["facets"]["schema"]["fields"]]
    assert columns[:2] == ["event_id", "user_id"] and columns[-1] == "_batch_id"

    (sealed,) = seal["outputs"]  # ready 11:20: only hour 10 is sealed
    assert [p["dimensions"] for p in sealed["outputFacets"]["subset"]["outputCondition"]["partitions"]] == [
        hour10
    ]

    (reread,) = rebuild["inputs"]
    assert reread["name"] == topic and reread["inputFacets"]["tidemark_kafkaOffsets"]["ranges"] == [
        {"partition": 0, "start": 0, "end": 3},
        {"partition": 1, "start": 0, "end": 3},
    ]
    (swapped,) = rebuild["outputs"]
    assert [p["dimensions"] for p in swapped["outputFacets"]["subset"]["outputCondition"]["partitions"]] == [
        hour10
    ]


def test_the_bootstrap_source_is_named_without_credentials() -> None:
    jdbc = source_dataset("jdbc jdbc:postgresql://db.example:5432/shop public.orders")
    assert (jdbc.namespace, jdbc.name) == ("postgresql://db.example:5432", "shop.public.orders")
    inline = source_dataset("jdbc jdbc:mysql://etl:s3cret@db.example:3306/shop orders")
    assert (inline.namespace, inline.name) == ("mysql://db.example:3306", "shop.orders")
    files = source_dataset("files /data/orders.parquet")
    assert (files.namespace, files.name) == ("file", "/data/orders.parquet")
