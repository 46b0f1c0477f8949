"""What each table's part of a group run did, and what the table's own Airflow task does next.

The group job writes one record per table and run (in the table's own state, so a group never
owns a table's records): ``ok`` with the job's result, ``skipped`` with why (a table written
by the stream is not dumped), ``failed`` with its error. Each table then has its own task
(``dump_table`` / ``seal_table``, mapped over the group's tables): it reports the record, or
fails with the table's own error, or, on a retry or a clear of that task alone, runs the job
for that table alone with the same run id, which the job's idempotency makes safe. Each record
carries the try number of the group task that wrote it: clearing the whole run runs the group
job again and its tables' tasks report its fresh records (one application, not one per table).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from tidemark.state.layout import run_key
from tidemark.state.storage import Location, delete, read_json, replace_atomically

OK, SKIPPED, FAILED = "ok", "skipped", "failed"


@dataclass(frozen=True)
class TableOutcome:
    """One table's part of one group job run."""

    group: str
    table: str
    job: str  # dump | seal
    run_id: str
    status: str  # ok | skipped | failed
    detail: str = ""  # why it was skipped, or the error
    error_type: str = ""
    seconds: float = 0.0
    result: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1  # the try number of the group task whose job wrote it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


KEEP_OUTCOMES = 200  # records kept per table and job; an older run's task finds none and runs alone


def _runs_dir(state_dir: Location | Any, table: str) -> Location:
    return Location(state_dir) / table / "group_runs"


def outcome_file(state_dir: Location | Any, table: str, job: str, run_id: str) -> Location:
    return _runs_dir(state_dir, table) / f"{job}-{run_key(run_id)}.json"


def record_outcome(state_dir: Location | Any, outcome: TableOutcome) -> None:
    """Last write wins: a later run of the same job and run id (a retry) says what happened.
    The newest ``KEEP_OUTCOMES`` runs' records are kept (an index of them beside; the older
    ones deleted first, so a crash in between leaves nothing unlisted): a cleared task of an
    older run finds no record and runs its table alone, which is safe."""
    table, job = outcome.table, outcome.job
    replace_atomically(outcome_file(state_dir, table, job, outcome.run_id), outcome.to_json())
    index = _runs_dir(state_dir, table) / f"{job}-index.json"
    runs = [r for r in (read_json(index) or {}).get("runs", []) if r != outcome.run_id] + [outcome.run_id]
    for old in runs[:-KEEP_OUTCOMES]:
        delete(outcome_file(state_dir, table, job, old))
    replace_atomically(index, {"runs": runs[-KEEP_OUTCOMES:]})


def read_outcome(state_dir: Location | Any, table: str, job: str, run_id: str) -> TableOutcome | None:
    data = read_json(outcome_file(state_dir, table, job, run_id))
    return TableOutcome(**data) if data else None


class Step(StrEnum):
    """What a table's own task does with the group job's record."""

    REPORT = "report"  # the group job did it: report the result
    SKIP = "skip"  # the group job skipped it, and said why
    FAIL = "fail"  # the group job failed it: fail with the table's own error (a retry runs it alone)
    RUN_ALONE = "run_alone"  # no record (the group job died before it), or a retry or a clear


def next_step(outcome: TableOutcome | None, try_number: int) -> Step:
    """A table's task takes the group job's word for the table when that job ran at least as
    many times as the task (its first try; or the whole run cleared: the group job ran again
    and wrote a fresh record); a later try of the table's task alone (Airflow's retry, or a
    person clearing that task) runs the table's job alone."""
    if outcome is None or outcome.attempt < try_number:
        return Step.RUN_ALONE
    return {OK: Step.REPORT, SKIPPED: Step.SKIP}.get(outcome.status, Step.FAIL)
