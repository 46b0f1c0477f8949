"""The Flink peer of bench/peers.py: Kafka -> hourly Parquet partitions committed by watermark.

Run by bench/peers.py with the PyFlink venv it installs (bench/peer_jobs/flink-requirements.txt),
never with tidemark's: PyFlink pins other pandas, pyarrow and numpy releases. The job is the
design of the seed articles as Flink's documentation writes it (the filesystem connector's
"Partition Commit"): event time with a bounded-disorder watermark, one Parquet partition
per hour, committed with a success file once the watermark passes the hour's end, files
compacted before the commit, exactly once through checkpoints. The source is bounded (the
topic's end offsets at the start), so the job ends once everything is committed.

    python flink_job.py BOOTSTRAP TOPIC OUT_DIR JARS PARALLELISM [json | avro REGISTRY_URL]

JSON events are parsed with the json format (a malformed message skipped); Avro events in the
Confluent wire format with the avro-confluent format (writer schemas from the registry,
resolved to the table's).

Prints one JSON line last: the settings used and the job's wall seconds.
"""

from __future__ import annotations

import json
import sys
import time

from pyflink.table import EnvironmentSettings, TableEnvironment

SETTINGS = {
    # Flink's filesystem sink commits files on checkpoints: exactly once needs them on
    "execution.checkpointing.interval": "10 s",
    "execution.checkpointing.mode": "EXACTLY_ONCE",
    # the default is one: the bench's topic has one partition per core at least
    "parallelism.default": "2",
    "table.exec.source.idle-timeout": "30 min",  # tidemark's idle_timeout
}

# the Kafka source, bounded by the topic's end offsets at the start; one per format below
SOURCE = """
CREATE TABLE events_src (
{columns},
  WATERMARK FOR ts AS ts - INTERVAL '10' MINUTE
) WITH (
  'connector' = 'kafka',
  'topic' = '{{topic}}',
  'properties.bootstrap.servers' = '{{bootstrap}}',
  'properties.group.id' = 'flink-peer',
  'properties.isolation.level' = 'read_committed',
  'scan.startup.mode' = 'earliest-offset',
  'scan.bounded.mode' = 'latest-offset',
{format}
)
"""

SOURCE_JSON = SOURCE.format(
    columns="""  event_id STRING,
  user_id BIGINT,
  app STRING,
  event_type STRING,
  amount STRING,
  event_time STRING,
  ts AS TO_TIMESTAMP(REPLACE(SUBSTR(event_time, 1, 19), 'T', ' '))""",
    format="""  'format' = 'json',
  'json.ignore-parse-errors' = 'true'""",
)

SOURCE_AVRO = SOURCE.format(
    columns="""  event_id STRING NOT NULL,
  user_id BIGINT,
  app STRING,
  event_type STRING NOT NULL,
  amount DECIMAL(12, 2),
  event_time TIMESTAMP(3) NOT NULL,
  ts AS event_time""",
    format="""  'format' = 'avro-confluent',
  'avro-confluent.url' = '{registry}'""",
)

SINK = """
CREATE TABLE events_hourly (
  event_id STRING,
  user_id BIGINT,
  app STRING,
  event_type STRING,
  amount DECIMAL(12, 2),
  event_time TIMESTAMP(3),
  dt STRING,
  hr STRING
) PARTITIONED BY (dt, hr) WITH (
  'connector' = 'filesystem',
  'path' = 'file://{out}',
  'format' = 'parquet',
  'sink.partition-commit.trigger' = 'partition-time',
  'partition.time-extractor.timestamp-pattern' = '$dt $hr:00:00',
  'sink.partition-commit.delay' = '1 h',
  'sink.partition-commit.watermark-time-zone' = 'UTC',
  'sink.partition-commit.policy.kind' = 'success-file',
  'auto-compaction' = 'true',
  'compaction.file-size' = '128MB',
  'sink.rolling-policy.file-size' = '128MB'
)
"""

INSERT = """
INSERT INTO events_hourly
SELECT event_id, user_id, app, event_type, CAST(amount AS DECIMAL(12, 2)), ts,
       DATE_FORMAT(ts, 'yyyy-MM-dd'), DATE_FORMAT(ts, 'HH')
FROM events_src
"""


def main(argv: list[str]) -> int:
    bootstrap, topic, out, jars, parallelism, *encoding = argv
    fmt = encoding[0] if encoding else "json"
    registry = encoding[1] if len(encoding) > 1 else ""
    settings = {**SETTINGS, "parallelism.default": parallelism, "pipeline.jars": jars}
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    for key, value in settings.items():
        env.get_config().set(key, value)
    env.get_config().set("table.local-time-zone", "UTC")
    source = SOURCE_AVRO if fmt == "avro" else SOURCE_JSON
    env.execute_sql(source.format(topic=topic, bootstrap=bootstrap, registry=registry))
    env.execute_sql(SINK.format(out=out))
    started = time.perf_counter()
    env.execute_sql(INSERT).wait()
    wall = time.perf_counter() - started
    print(json.dumps({"settings": {**settings, "format": fmt}, "job_wall_s": round(wall, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
