"""A Spark Python data source that reads exact offset ranges of a Kafka-protocol topic.

Maven Central is out of reach here, so spark-sql-kafka cannot be had; this source does the job
with confluent-kafka and ``assign()`` (no group membership, no rebalancing). Each planned
partition range is split into sub-ranges for parallelism; a task never reads past its end,
and it fails loudly, naming topic, partition and offsets, if it cannot reach it.

A task classifies what it reads where that is cheapest, in Arrow (``tidemark.ingest.classify``).
Two ways run the same per-sub-range code:

- :func:`stage_ranges`, the dump's path: plain Spark tasks (one per sub-range) that also write
  their rows, late rows and dirty records as Parquet files under the batch's staging directory
  (``tidemark.ingest.staging``) and return only their counts. Records never cross into the JVM, and
  no DataFrame is planned: the Python data source's planning starts three extra Python
  processes per job, which cost about 5 s per batch on 2 cores (docs/benchmarks.md).
- the data source (:func:`read_ranges`): the classified records as a DataFrame
  (``transform.classified_ddl``), for the paths that need Spark over the whole batch (tables
  with data-derived partition columns, rebuilds).

Every sub-range writes a receipt (records read, first/last offset) next to the batch's staging
files, after its files: reconciliation compares these independent counts with the rows and
dirty records written.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: TID253
from pyspark.sql.types import StructType  # noqa: TID253

from tidemark.driver_tasks import local_cores, map_slices
from tidemark.faults import crash_point
from tidemark.ingest.classify import Classifier
from tidemark.ingest.counts import StagedCount
from tidemark.ingest.frames import as_classified, classified_ddl
from tidemark.ingest.reader import DEFAULT_SUBRANGE, RangeConsumer, SubRange, split_ranges  # noqa: TID253
from tidemark.ingest.spec import ClassifySpec
from tidemark.ingest.staging import StagingTargets, TaskStager
from tidemark.tablefs import Store
from tidemark.task_runtime import task_body

SOURCE_NAME = "tidemark_kafka"


class KafkaRangeDataSource(DataSource):
    """Options: ``topic``, ``ranges`` (JSON list of {partition,start,end}), ``receipts`` (dir),
    ``spec`` (a ClassifySpec as JSON), ``subrange`` (max offsets per task) and
    ``secret.kafka_conf`` (JSON librdkafka config; the option name matches Spark's redaction
    pattern so it never shows in plans or the UI)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return classified_ddl(ClassifySpec.from_json(self.options["spec"]))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaRangeReader(dict(self.options))


class KafkaRangeReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.topic = options["topic"]
        self.ranges = json.loads(options["ranges"])
        self.conf = json.loads(options["secret.kafka_conf"])
        self.receipts = Store(options["receipts"], json.loads(options.get("secret.s3", "{}")))
        self.subrange = int(options.get("subrange", DEFAULT_SUBRANGE))
        self.spec = options["spec"]

    def partitions(self) -> list[InputPartition]:
        return list(split_ranges(self.ranges, self.subrange))

    @task_body
    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SubRange)
        spec = ClassifySpec.from_json(self.spec)
        classifier = Classifier(spec)
        reader = RangeConsumer(self.topic, partition, self.conf)
        for i, block in enumerate(reader.blocks()):
            yield from as_classified(classifier.classify(block), spec).to_batches()
            if i == 0:
                crash_point("mid_read")
        reader.write_receipt(self.receipts, "")


@task_body
def stage_subranges(
    subs: Iterable[SubRange],
    *,
    topic: str,
    conf: dict[str, Any],
    spec_json: str,
    targets: StagingTargets,
) -> Iterator[StagedCount]:
    """One Spark task: read, classify and stage each sub-range; its files first, then its
    receipt, then its counts (``staging.TaskStager.stats``)."""

    spec = ClassifySpec.from_json(spec_json)
    classifier = Classifier(spec)
    for sub in subs:
        stager = TaskStager(targets, spec, sub.mq_partition, sub.start)
        reader = RangeConsumer(topic, sub, conf)
        for i, block in enumerate(reader.blocks()):
            stager.add(classifier.classify(block))
            if i == 0:
                crash_point("mid_read")
        stager.close()
        reader.write_receipt(targets.store, targets.receipts)
        yield from stager.stats()


def read_ranges(
    spark: Any,
    topic: str,
    ranges: Sequence[dict[str, int]],
    *,
    kafka_conf: dict[str, Any],
    receipts: Store,
    spec: ClassifySpec,
) -> Any:
    """The classified records of exactly ``ranges`` of ``topic``, as a DataFrame; each
    sub-range read writes its receipt in the ``receipts`` store's root (any filesystem: the
    store's settings travel with the read, under a redacted option name)."""
    spark.dataSource.register(KafkaRangeDataSource)
    return (
        spark.read.format(KafkaRangeDataSource.name())
        .option("topic", topic)
        .option("ranges", json.dumps([dict(r) for r in ranges if int(r["end"]) > int(r["start"])]))
        .option("secret.kafka_conf", json.dumps(kafka_conf))
        .option("receipts", receipts.root)
        .option("secret.s3", json.dumps(receipts.s3))
        .option("spec", spec.to_json())
        .load()
    )


def stage_ranges(
    spark: Any,
    topic: str,
    ranges: Sequence[dict[str, int]],
    *,
    kafka_conf: dict[str, Any],
    spec: ClassifySpec,
    targets: StagingTargets,
    meanwhile: Callable[[], object] | None = None,
) -> list[StagedCount]:
    """Stage exactly ``ranges`` of ``topic`` at ``targets``, the sub-ranges shared by as many
    Spark tasks as cores (on a local master whose session has not started, the same tasks in
    processes forked from the driver: ``driver_tasks``, ``meanwhile`` running in the driver
    while they read); return the tasks' counts per MQ partition, hour, lateness and reason."""
    subs = split_ranges(ranges, DEFAULT_SUBRANGE)
    if not subs:
        return []
    task = functools.partial(
        stage_subranges,
        topic=topic,
        conf=kafka_conf,
        spec_json=spec.to_json(),
        targets=targets,
    )
    # as many tasks as cores, each reading its share of the sub-ranges in turn: a Python
    # task's start costs ~0.1 s here, and more tasks than cores only queue
    cores = local_cores(spark)
    if cores is not None:  # a local master, no session yet: the same tasks, no JVM
        return map_slices(task, subs, min(len(subs), cores), meanwhile=meanwhile)
    slices = min(len(subs), spark.sparkContext.defaultParallelism)
    result: list[StagedCount] = spark.sparkContext.parallelize(subs, slices).mapPartitions(task).collect()
    return result
