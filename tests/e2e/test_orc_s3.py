"""An ORC table on the production topology's store (warehouse and state on S3), with the jobs
as spark-submit runs them: the seal, an amend of late rows and a rebuild write ORC version
directories (through pyarrow in the tasks), and each version holds every row once."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.orc as orc  # noqa: TID253
import pytest

from tests.helpers.jobs import run_job_process
from tests.helpers.tables import at, fresh_table
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark.tablefs import Store
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.e2e


def run(settings: Settings, job: str, table: str, run_id: str, *extra: str) -> dict[str, Any]:
    code, out, err = run_job_process(settings, job, table, run_id, *extra)
    assert code == 0, err[-3000:]
    return dict(json.loads(out.splitlines()[-1]))


def hour_offsets(settings: Settings, table: str) -> tuple[list[str], Counter[tuple[int, int]]]:
    """The current version of hour 10 (its journal entry's files) and the offsets they hold."""
    entry = HourJournal(settings.state_location, table).state().hours["2026-11-22T10"]
    store = Store.of(settings.warehouse)
    found: Counter[tuple[int, int]] = Counter()
    for relative in entry.files:
        with store.fs.open_input_file(store.path(relative)) as handle:
            t = orc.ORCFile(handle).read(columns=["_mq_partition", "_mq_offset"])
        found.update(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))
    return list(entry.files), found


def test_an_orc_table_on_s3_seals_amends_and_rebuilds(
    broker: str, settings: Settings, s3: str, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, late_policy="amend", output__format="orc")
    lake = f"{s3}/{uuid.uuid4().hex[:10]}"
    settings = replace(
        settings, warehouse=f"{lake}/warehouse", state_uri=f"{lake}/state", home=tmp_path / "home"
    )
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 2)
    sent = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)]))
    sent += produce(broker, topic, records([(0, at(11, 40)), (1, at(11, 30))], prefix="b"))
    run(settings, "dump", table, "run-1", "--processing-time", at(12).isoformat())
    assert run(settings, "seal", table, "seal-1")["sealed"] == ["2026-11-22T10"]
    files, found = hour_offsets(settings, table)
    on_time = Counter((p, o) for p, o, m in sent if m.event_time is not None and m.event_time.hour == 10)
    assert files and all(f.endswith(".orc") for f in files) and found == on_time

    late = produce(broker, topic, records([(0, at(10, 15)), (1, at(10, 45))], prefix="late"))
    run(settings, "dump", table, "run-2", "--processing-time", at(12, 10).isoformat())
    assert run(settings, "seal", table, "seal-2")["amended"] == ["2026-11-22T10"]
    files, found = hour_offsets(settings, table)
    assert all(f.endswith(".orc") for f in files) and found == on_time + Counter((p, o) for p, o, _ in late)

    rebuilt = run(settings, "rebuild", table, "rebuild-1", "--hours", "2026-11-22T10")
    assert rebuilt["hours"][0]["status"] == "rebuilt"
    files_after, found_after = hour_offsets(settings, table)
    assert files_after != files and all(f.endswith(".orc") for f in files_after) and found_after == found
