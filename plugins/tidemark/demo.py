"""`make demo`: the dump end to end on embedded defaults.

Starts the local broker (unless one runs), creates the `events` topic with 4 partitions,
produces a generated clickstream with disorder and a dirty fraction, runs three exactly-once
micro-batches (the third is a retry of the second run id, to show it is a no-op), prints
`tidemark status`, checks produced == rows + dirty, and stops what it started.
Driving the same batches through the Airflow ingest DAG and sealing hours come with the next
issues (see docs/design-status.md).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from tidemark.config import load_table
from tidemark.dump import run_dump
from tidemark.generator import create_topic, events, produce
from tidemark.services import BrokerService
from tidemark.settings import Settings
from tidemark.spark import build_session
from tidemark.status import render, table_status

log = logging.getLogger(__name__)


def run_demo(settings: Settings | None = None, *, records: int = 20_000) -> int:
    settings = settings or Settings.from_env()
    config = load_table("events", settings)
    broker = BrokerService(settings)
    started_here = not broker.status().running
    broker.start()
    try:
        topic = config.source.topic
        create_topic(settings.kafka_bootstrap, topic, 4)
        start = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)  # fixed: the demo is reproducible
        produced = produce(
            settings.kafka_bootstrap,
            topic,
            events(
                records,
                start=start,
                span=timedelta(hours=3),
                disorder=timedelta(minutes=5),
                dirty_fraction=0.01,
            ),
        )
        print(f"produced {len(produced)} messages to {topic} (4 partitions)", flush=True)
        spark = build_session("tidemark-demo", settings, hive=False)
        try:
            processing = start + timedelta(hours=3, minutes=10)
            half = records // 8  # per partition per batch: two batches drain the topic
            capped = config.model_copy(
                update={"source": config.source.model_copy(update={"max_records_per_partition": half})}
            )
            for run_id in ("demo__1", "demo__2", "demo__2"):
                result = run_dump(spark, capped, settings, run_id, processing)
                print(
                    f"run {run_id}: batch {result.batch_id} {result.status}: read {result.read}, rows {result.rows}, dirty {result.dirty}",
                    flush=True,
                )
        finally:
            spark.stop()
        status = table_status(config, settings)
        print(render(status))
        landed = status["rows"] + status["dirty"]
        verdict = "OK" if landed == len(produced) else "MISMATCH"
        print(
            f"reconciliation: produced {len(produced)} == rows {status['rows']} + dirty {status['dirty']}: {verdict}"
        )
        return 0 if landed == len(produced) else 1
    finally:
        if started_here:
            broker.stop()
