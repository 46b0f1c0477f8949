"""A Spark job's lines keep their level in the task log (``tidemark.airflow.spark_log``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from tidemark.airflow.spark_log import LeveledLines, jvm_log_file, jvm_log_options, line_level

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("26/11/28 14:00:00 WARN SparkConf: The configuration key ... is deprecated", logging.WARNING),
        ("26/11/28 14:00:00 ERROR Executor: Exception in task 0.0", logging.ERROR),
        ("26/11/28 14:00:00 INFO SparkContext: Running Spark version 4.1.3", logging.INFO),
        (
            "2026-11-28 14:00:00,123 WARNING tidemark.ingest.dump: events: MQ partition 2 idle",
            logging.WARNING,
        ),
        ("2026-11-28 14:00:00,123 INFO tidemark.ingest.dump: events: batch 3 planned", logging.INFO),
        ("2026-11-28 14:00:00,123 ERROR tidemark.jobs: ConfigError: bad", logging.ERROR),
        ('{"batch_id": 3, "rows": 10}', logging.INFO),
    ],
)
def test_a_line_carries_its_level(line: str, level: int) -> None:
    assert line_level(line) == level


def test_a_trace_keeps_the_level_of_the_line_it_continues() -> None:
    lines = [
        "2026-11-28 14:00:00,123 ERROR tidemark.jobs: the dump failed",
        "Traceback (most recent call last):",
        'File "/x/dump.py", line 3, in run',
        "tidemark.errors.source.TopicRecreatedError: events: topic re-created",
        "26/11/28 14:00:01 WARN TaskSetManager: Lost task 0.0",
        "org.apache.spark.SparkException: Job aborted",
        "at org.apache.spark.scheduler.DAGScheduler.failJob(DAGScheduler.scala:1)",
        "... 12 more",
        "a plain line after it",
    ]
    levels, previous = [], logging.INFO
    for line in lines:
        previous = line_level(line, previous)
        levels.append(previous)
    E, W, INFO = logging.ERROR, logging.WARNING, logging.INFO
    assert levels == [E, E, E, E, W, W, W, W, INFO]


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, tuple[Any, ...]]] = []

    def log(self, level: int, message: str) -> None:
        self.calls.append(("log", level, (message,)))

    def info(self, message: str, *args: Any) -> None:
        self.calls.append(("info", message, args))

    def warning(self, message: str, *args: Any) -> None:
        self.calls.append(("warning", message, args))


def test_the_hooks_logger_sends_each_line_at_its_level_and_the_rest_unchanged() -> None:
    inner = Recorder()
    leveled = LeveledLines(inner)
    leveled.info("26/11/28 14:00:00 WARN Utils: spilling")
    leveled.info("Identified spark driver id: %s", "driver-1")  # the hook's own message
    leveled.warning("kept as is")
    assert inner.calls == [
        ("log", logging.WARNING, ("26/11/28 14:00:00 WARN Utils: spilling",)),
        ("info", "Identified spark driver id: %s", ("driver-1",)),
        ("warning", "kept as is", ()),
    ]


def test_the_jvm_log_is_one_file_per_task_try_and_the_config_is_written_once(tmp_path: Path) -> None:
    log_file = jvm_log_file(
        tmp_path / "logs", "tidemark_ingest_events", "manual__2026-11-28T14:00:00+00:00", "dump", 2
    )
    assert (
        log_file
        == tmp_path / "logs/jobs/tidemark_ingest_events/manual__2026-11-28T14_00_00+00_00/dump.2.jvm.log"
    )
    options = jvm_log_options(tmp_path / "conf", log_file)
    config = tmp_path / "conf" / "log4j2-jobs.properties"
    assert options == f"-Dlog4j2.configurationFile={config} -Dtidemark.jvm.log={log_file}"
    text = config.read_text()
    assert "appender.console.filter.threshold.level = warn" in text and "${sys:tidemark.jvm.log" in text
    assert log_file.parent.is_dir()
