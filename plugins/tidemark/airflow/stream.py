"""The stream DAG of a table: hand the table to the stream (or back), keep the stream running,
watch it from the triggerer (no worker slot held while it runs), announce what it sealed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator  # noqa: TID253
from airflow.triggers.base import BaseTrigger, TriggerEvent  # noqa: TID253

from tidemark.airflow.common import dry_run_param, table_context, table_dag, text_param
from tidemark.airflow.task_groups import metrics_task, publish_tasks
from tidemark.config import TableConfig
from tidemark.settings import Settings
from tidemark.stream.status import stream_health

POLL_S = 5.0


class StreamHealthTrigger(BaseTrigger):
    """Polls the stream's status record until there is something to act on: hours to
    announce, the stream stopped or failed (or silent past ``stale_after_s``), or ``until``.
    A status record older than ``since`` (the watch's start) is a stream not started yet,
    given ``stale_after_s`` to write its first heartbeat."""

    def __init__(self, table: str, since: str, until: str, stale_after_s: float) -> None:
        super().__init__()
        self.table = table
        self.since = since
        self.until = until
        self.stale_after_s = stale_after_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "since": self.since,
                "until": self.until,
                "stale_after_s": self.stale_after_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settings = Settings.from_env()
        since, until = datetime.fromisoformat(self.since), datetime.fromisoformat(self.until)
        stale = timedelta(seconds=self.stale_after_s)
        while True:
            now = datetime.now(UTC)
            health = await asyncio.to_thread(stream_health, self.table, settings, stale_after=stale, now=now)
            verdict = watch_verdict(health, since=since, now=now, until=until, stale_after=stale)
            if verdict is not None:
                yield TriggerEvent({**health, "verdict": verdict})
                return
            await asyncio.sleep(POLL_S)


FAILED_VERDICTS = ("failed", "silent", "not_started")


def watch_verdict(
    health: dict[str, Any], *, since: datetime, now: datetime, until: datetime, stale_after: timedelta
) -> str | None:
    """None: keep watching; else why the watch ends (``FAILED_VERDICTS`` fail the task)."""
    beat = health["status"].get("heartbeat_at")
    current = beat is not None and datetime.fromisoformat(beat) >= since  # written by this stream
    if health["mode"] != "stream":  # handed back to batch: wait for the stream to stop
        if health["state"] != "running" or not health["alive"]:
            return "stopped"
    elif health["unannounced"]:
        return "hours_to_announce"
    elif health["state"] == "failed" and current:
        return "failed"
    elif not current or health["state"] != "running":
        if now - since > stale_after:
            return "not_started" if not current else "failed" if health["state"] == "failed" else "silent"
    elif not health["alive"]:
        return "silent"
    return "timed_out" if now >= until else None


class StreamHealthSensor(BaseSensorOperator):
    """Defers to :class:`StreamHealthTrigger` at once; fails when the stream failed, went
    silent or never started (the next run restarts it through ``ensure_stream``)."""

    def __init__(self, *, table: str, watch_for: timedelta, stale_after: timedelta, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.watch_for = watch_for
        self.stale_after = stale_after

    def execute(self, context: Any) -> None:
        since = datetime.now(UTC)  # the watch's own window, not data logic
        self.defer(
            trigger=StreamHealthTrigger(
                self.table,
                since.isoformat(),
                (since + self.watch_for).isoformat(),
                self.stale_after.total_seconds(),
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from tidemark.stream.status import StreamError

        verdict = event["verdict"]
        self.log.info(
            "%s: stream %s (writer %s, heartbeat %ss ago): %s; hours to announce %s",
            self.table,
            event["state"],
            event["mode"],
            event["heartbeat_age_s"],
            verdict,
            event["unannounced"],
        )
        if verdict in FAILED_VERDICTS:
            raise StreamError(
                f"{self.table}: the stream is {verdict} ({event['message'] or 'no message'}; last heartbeat "
                f"{event['heartbeat_age_s']}s ago). The next run starts it again from the commit log; see "
                f"tidemark status --table {self.table} and logs/stream-{self.table}.log"
            )
        return {k: event[k] for k in ("verdict", "state", "mode", "unannounced")}


def _doc(config: TableConfig) -> str:
    table = config.table
    return f"""
### Continuous ingestion of `{table}`
The stream (`spark_jobs/stream.py`) writes the table in micro-batches every
`{config.stream.trigger_interval}` through the same commit protocol and commit log as the ingest
DAG, and seals hours as the ready time passes them. Only one writer reads the topic: the ingest
DAG's dumps skip while the table is in stream mode.

Trigger with **switch to** `stream` (and a reason) to hand the table to the stream; `batch`
hands it back (the stream stops after its current micro-batch, this run waits for it). Each
run starts the stream if the table is in stream mode and it is not running, then watches it
from the triggerer (`watch_stream` is deferred: no worker slot) until hours are sealed (then
`announce` emits their asset events), it fails or goes silent (the task fails; the next run
restarts it from the commit log), or the run's watch ends.

Inspect: `tidemark status --table {table}`; the stream's log: `logs/stream-{table}.log`.
"""


def switch_step(table: str, context: dict[str, Any]) -> str:
    """Apply the trigger form's switch, once per run (a retry finds it done); a dry run
    reports and skips everything after it."""
    from airflow.sdk.exceptions import AirflowSkipException

    from tidemark.stream.launch import dry_run_report
    from tidemark.table import Table

    config, current = table_context(table)
    params, run = context["params"], context["dag_run"]
    if params.get("dry_run"):
        report = dry_run_report(config, current, datetime.now(UTC))
        raise AirflowSkipException(f"{table}: dry run: {json.dumps(report, default=str)}")
    writer = Table.read(config, current).state.writer
    if not params.get("switch_to"):
        return writer.current().describe()
    at = (run.run_after or datetime.now(UTC)).isoformat()
    by = run.triggering_user_name or "airflow"
    mode, _ = writer.switch(params["switch_to"], by=by, reason=params.get("reason") or "", at=at)
    return mode.describe()


def stream_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_stream_<table>``: switch (trigger form), ensure running, watch, announce."""
    from airflow.sdk import task

    table = config.table
    params = {
        "dry_run": dry_run_param("the writer, the stream's health and what its next micro-batch would read"),
        "switch_to": text_param(
            enum=["stream", "batch"],
            title="Switch to",
            description="Hand the table to the stream or back to the batch ingest DAG (audited; needs "
            "a reason). Empty: keep the current writer.",
        ),
        "reason": text_param(title="Reason", description="Why the switch (kept in the audit log)."),
    }
    description = f"Continuous micro-batches of {config.source.topic} into {table}"
    with table_dag(
        config,
        "stream",
        description=description,
        schedule=config.schedule,
        doc_md=_doc(config),
        params=params,
    ) as dag:

        @task(task_id="switch")
        def switch(**context: Any) -> str:
            """The trigger form's switch (``switch_step``)."""
            return switch_step(table, context)

        @task(task_id="ensure_stream")
        def ensure_stream(**context: Any) -> dict[str, Any]:
            """Start the stream unless it runs or the table is in batch mode."""
            from tidemark.stream.launch import ensure_stream as ensure

            return ensure(table_context(table)[1], table, f"stream__{context['run_id']}")

        watch = StreamHealthSensor(
            task_id="watch_stream",
            table=table,
            watch_for=timedelta(minutes=50),
            stale_after=max(timedelta(minutes=2), 6 * config.stream.trigger_interval),
            doc_md="Deferred: the triggerer polls the stream's status record (no worker slot).",
        )
        switch() >> ensure_stream() >> watch >> publish_tasks(config, settings) >> metrics_task()(table)
    return dag
