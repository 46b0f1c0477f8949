"""What needs a person's attention: overdue hours and failed tasks.

Seal deadlines: an hour should be sealed by its end + ``commit_delay`` + ``seal_grace``.

An overdue hour means the pipeline is stalled (no runs, a failing task) or an MQ partition's
watermark is stuck (a producer with a broken clock, a partition that neither moves nor goes
idle). The ingest DAG's ``check_deadlines`` task fails with ``SealDeadlineMissedError`` naming
each overdue hour and what holds it; the health page lists the same hours. The reference time
is passed in (the run's data interval end), never read from the clock inside a task.

Failed tasks: every tidemark DAG's ``on_failure_callback`` records the failure (task, run,
try, error) in ``<state>/<table>/alerts/failures.json`` (the newest ``KEEP_FAILURES``), which
the health page shows beside Airflow's own red squares.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tidemark.config import TableConfig
from tidemark.masking import mask_text
from tidemark.observe.status import explain_hour
from tidemark.seal.due import first_unsealed_hour
from tidemark.settings import Settings
from tidemark.state.storage import Location, read_json, replace_atomically
from tidemark.table import Table
from tidemark.time.hours import Hour, hours_from, parse_key

log = logging.getLogger(__name__)

KEEP_FAILURES = 50


def deadline(config: TableConfig, hour: Hour) -> datetime:
    return hour.end + config.watermark.commit_delay + config.watermark.seal_grace


def overdue_hours(config: TableConfig, settings: Settings, as_of: datetime) -> dict[str, str]:
    """Hour key -> why it is not sealed, for every hour past its deadline at ``as_of``.

    Hours are counted from the sealed frontier (or the first hour with committed rows): a
    table that never received data has no overdue hour.
    """

    table_state = Table.read(config, settings).state
    journal = table_state.journal.state()
    state = table_state.commit_log.state()
    first = first_unsealed_hour(config, state, journal)
    if first is None:
        return {}
    limit = as_of - config.watermark.commit_delay - config.watermark.seal_grace
    late = [hour for hour in hours_from(first, ending_by=limit) if hour.key not in journal.hours]
    if not late:
        return {}
    # What holds the hours back is global (the ready time), so one explanation serves them all.
    reason = explain_hour(config, settings, late[0].key)["reason"]
    return {hour.key: f"due {deadline(config, hour).isoformat()}; {reason}" for hour in late}


@dataclass(frozen=True)
class OverdueRange:
    """Consecutive overdue hours held back by the same thing: one line, however long the stall."""

    first: str
    last: str
    hours: int
    first_due: str
    reason: str

    def describe(self, table: str) -> str:
        span = self.first if self.hours == 1 else f"{self.first} .. {self.last} ({self.hours} hours)"
        return (
            f"{span}: due since {self.first_due}; {self.reason}; "
            f"explain: tidemark status --table {table} --hour {self.first}"
        )


def group_overdue(config: TableConfig, overdue: dict[str, str]) -> list[OverdueRange]:
    """``overdue_hours``' answer as ranges of consecutive hours with the same reason, oldest
    first (a table stalled for 51 hours is one range, not 51 alerts)."""
    zone = config.event_time.time_zone
    ranges: list[OverdueRange] = []
    previous: Hour | None = None
    for hour in sorted((parse_key(k, zone) for k in overdue), key=lambda h: h.start):
        due, _, reason = overdue[hour.key].partition("; ")
        last = ranges[-1] if ranges else None
        if last is not None and previous is not None and previous.end == hour.start and last.reason == reason:
            ranges[-1] = OverdueRange(last.first, hour.key, last.hours + 1, last.first_due, reason)
        else:
            ranges.append(OverdueRange(hour.key, hour.key, 1, due.removeprefix("due "), reason))
        previous = hour
    return ranges


def describe_overdue(config: TableConfig, overdue: dict[str, str]) -> list[str]:
    """One line per range of consecutive overdue hours (the task log, the error, the page)."""
    return [r.describe(config.table) for r in group_overdue(config, overdue)]


def failures_file(settings: Settings, table: str) -> Location:
    return settings.state_location / table / "alerts" / "failures.json"


def recent_failures(settings: Settings, table: str) -> list[dict[str, Any]]:
    """Recorded task failures of the table, newest first."""
    data = read_json(failures_file(settings, table)) or {}
    return list(data.get("failures", []))


def record_failure(table: str, context: Any) -> None:
    """``on_failure_callback`` of every tidemark task: one line in the log, one record for the
    health page. Never raises (a broken alert must not hide the original failure)."""
    try:
        ti = context["task_instance"]
        failure = {
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "run_id": ti.run_id,
            "try_number": ti.try_number,
            "error": mask_text(str(context.get("exception") or ""))[:500],
            "logical_date": str(context.get("logical_date") or ""),
        }
        log.error(
            "tidemark alert: %s task %s failed in run %s: %s", table, ti.task_id, ti.run_id, failure["error"]
        )
        settings = Settings.from_env()
        path = failures_file(settings, table)
        kept = [failure, *recent_failures(settings, table)][:KEEP_FAILURES]
        replace_atomically(path, {"failures": kept})
    except Exception:
        log.exception("%s: could not record the task failure", table)


def record_group_failure(tables: list[str], context: Any) -> None:
    """``on_failure_callback`` of a group DAG's tasks: recorded for the table the task serves
    (a mapped task's ``table``, ``announce_<table>``), or for every table of the group when
    the task is the group's own (its shared dump or seal)."""
    task = context.get("task")
    table = getattr(task, "table", None) or (getattr(task, "op_kwargs", None) or {}).get("table")
    task_id = str(getattr(task, "task_id", ""))
    if table is None and task_id.startswith("announce_"):
        table = task_id.removeprefix("announce_")
    for each in [table] if table in tables else tables:
        record_failure(each, context)
