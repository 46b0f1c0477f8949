"""A Spark job's lines in the Airflow task log at their own level, without the JVM's start-up.

spark-submit's output reaches the task log line by line through the provider's hook, every
line at INFO. Here:

- :func:`line_level` reads the level a line carries (log4j's ``26/11/28 14:00:00 WARN ...``,
  Python's ``2026-11-28 14:00:00,123 WARNING ...``); a traceback's or stack trace's next lines
  keep the level of the line they continue;
- :class:`LeveledLines` is the hook's logger with ``info(line)`` sent at that level;
- :func:`jvm_log_options` points the driver JVM at a log4j2 configuration whose console (the
  task log) shows WARN and above, while every line, INFO included, goes to a file of the task
  try (:func:`jvm_log_file`), whose path the task log names. About fifty lines of Spark, Hive
  and Derby start-up no longer come before tidemark's first line.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

LEVELED = re.compile(
    r"^(?:\d\d/\d\d/\d\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d+)?) "
    r"(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL|CRITICAL)\b"
)
LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "CRITICAL": logging.CRITICAL,
}
# the hook strips each line: a continuation is known by how it starts, not by its indent
CONTINUATION = re.compile(
    r"^(?:Traceback \(most recent call last\)|File \"|at [\w$.<>]+\(|Caused by:|\.\.\. \d+ more|"
    r"Suppressed:|\^+$|[\w.$]+(?:Error|Exception|Exit)(?::|$)|py4j\.protocol\.)"
)


def line_level(line: str, previous: int = logging.INFO) -> int:
    """The logging level ``line`` carries; ``previous`` for a line that continues the one
    before (a traceback, a Java stack trace), INFO for any other line."""
    leveled = LEVELED.match(line)
    if leveled:
        return LEVELS[leveled.group(1)]
    if CONTINUATION.match(line):
        return previous
    return logging.INFO


class LeveledLines:
    """The hook's logger, with each spark-submit line (``info(line)`` without arguments)
    logged at the level it carries; every other call goes through unchanged."""

    def __init__(self, logger: Any) -> None:
        self._logger = logger
        self._previous = logging.INFO

    def info(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not isinstance(message, str):
            return self._logger.info(message, *args, **kwargs)
        self._previous = line_level(message, self._previous)
        return self._logger.log(self._previous, message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


# log4j2: the console (spark-submit's stderr: the task log) WARN and above in Spark's own line
# format, which line_level reads; every line to the task try's file
LOG4J2_JOBS = """\
status = error
name = tidemark-jobs
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:tidemark.jvm.log:-/dev/null}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
rootLogger.appenderRef.file.ref = file
"""
# what every local start-up warns about and no one can act on: the file keeps these lines
QUIET_AT_START = (
    "org.apache.hadoop.util.NativeCodeLoader",  # no native Hadoop library: expected, harmless
    "org.apache.hadoop.hive.conf.HiveConf",  # "HiveConf of name ... does not exist"
    "org.apache.hadoop.hive.metastore.ObjectStore",  # Derby's schema version at its first boot
    "org.apache.spark.util.Utils",  # "hostname resolves to a loopback address"
    "org.apache.hadoop.hive.ql.session.SessionState",  # "METASTORE_FILTER_HOOK will be ignored"
    "hive.log",  # Hive's "Updating partition stats fast" and "Updated size to", news at WARN
)


def log4j2_properties() -> str:
    """The configuration :func:`jvm_log_options` points the driver at."""
    quiet = "".join(
        f"logger.quiet{i}.name = {name}\nlogger.quiet{i}.level = info\n"
        f"logger.quiet{i}.appenderRef.file.ref = file\nlogger.quiet{i}.additivity = false\n"
        for i, name in enumerate(QUIET_AT_START)
    )
    return LOG4J2_JOBS + quiet


def jvm_log_file(log_dir: Path, dag_id: str, run_id: str, task_id: str, try_number: int) -> Path:
    """Where the driver JVM of one task try writes every line."""
    safe = re.sub(r"[^\w.+-]", "_", run_id)
    return log_dir / "jobs" / dag_id / safe / f"{task_id}.{try_number}.jvm.log"


def jvm_log_options(config_dir: Path, log_file: Path) -> str:
    """The driver's JVM options for :data:`LOG4J2_JOBS` and ``log_file`` (both written here)."""
    config_dir.mkdir(parents=True, exist_ok=True)
    config = config_dir / "log4j2-jobs.properties"
    text = log4j2_properties()
    if not config.is_file() or config.read_text() != text:
        partial = config.with_suffix(".partial")
        partial.write_text(text)
        partial.replace(config)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    return f"-Dlog4j2.configurationFile={config} -Dtidemark.jvm.log={log_file}"
