"""A note on every rebuild run (a backfill's included) naming the hours it rebuilds, so the
grid's run list says what each run was for without opening its logs.

A task cannot write this note: Airflow 3's Task SDK and Execution API have no call that
sets a DAG run's note. The scheduler can: it calls the DAG-run listeners of the plugins when a
run starts, inside its own database session, so the note set here is saved with the run's
start. A note someone already wrote is never replaced."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airflow.listeners import hookimpl  # noqa: TID253

from tidemark.airflow.common import table_context
from tidemark.airflow.dag_ids import dag_id_of, table_of_dag
from tidemark.errors import TidemarkError
from tidemark.seal.rebuild_plan import hour_range, hours_between

log = logging.getLogger(__name__)

NOTE_LIMIT = 1000  # the characters Airflow's dag_run_note column holds


def rebuild_note(
    table: str,
    zone: str,
    *,
    params: Mapping[str, Any],
    interval: tuple[datetime | None, datetime | None],
    backfill_id: int | None = None,
) -> str:
    """What a rebuild run rebuilds, in the words of its plan task: the trigger form's hour range,
    else the hours of its data interval."""
    first, last = params.get("first_hour"), params.get("last_hour")
    try:
        if first:
            hours = hour_range(first, last or first, zone)
        elif interval[0] is not None and interval[1] is not None:
            hours = hours_between(interval[0], interval[1], zone)
        else:
            return f"Rebuild of {table}: no hour given (set first_hour)"
    except TidemarkError as exc:
        return f"Rebuild of {table}: {exc}"
    if not hours:
        span = "no hour"
    elif len(hours) == 1:
        span = f"hour {hours[0].key}"
    else:
        span = f"hours {hours[0].key} .. {hours[-1].key} ({len(hours)} hours)"
    origin = f" (backfill {backfill_id})" if backfill_id is not None else ""
    dry = "Dry run: would rebuild" if params.get("dry_run") else "Rebuilds"
    return f"{dry} {table} {span}{origin}"[:NOTE_LIMIT]


def note_of(dag_run: Any) -> str | None:
    """The note a tidemark rebuild run gets, else None (another DAG, or its table's config does
    not load: the run's own plan task fails with that error)."""
    table = table_of_dag(dag_run.dag_id)
    if table is None or dag_run.dag_id != dag_id_of("rebuild", table):
        return None
    try:
        config, _ = table_context(table)
    except TidemarkError as exc:
        log.warning("no run note for %s %s: %s", dag_run.dag_id, dag_run.run_id, exc)
        return None
    return rebuild_note(
        table,
        config.event_time.time_zone,
        params=dag_run.conf or {},
        interval=(dag_run.data_interval_start, dag_run.data_interval_end),
        backfill_id=dag_run.backfill_id,
    )


@hookimpl
def on_dag_run_running(dag_run: Any, msg: str) -> None:
    """Called by the scheduler as it starts a run (a backfill's, a re-run after a clear too)."""
    if dag_run.note:
        return
    note = note_of(dag_run)
    if note:
        dag_run.note = note
        log.info("%s %s: note %r", dag_run.dag_id, dag_run.run_id, note)
