"""Crash points between the protocol's other steps, in-process (TIDEMARK_FAIL_MODE=raise): the
step fails there once, its retry (same run id, or another run's) recovers, and the table ends
exact: every produced offset once, every sealed hour holding the rows its journal says."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import at, fresh_table, landed, late_landed
from tidemark.errors import InjectedFault
from tidemark.faults import PROTOCOL_POINTS
from tidemark.ingest.dump import run_dump
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog
from tidemark.state.journal import HourJournal
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration


# every point on the local disk's default layout (in place), and on output.layout: versioned
# (a directory per version, as on an object store: test_versioned_layout)
CASES = [(p, "auto") for p in PROTOCOL_POINTS] + [(p, "versioned") for p in PROTOCOL_POINTS]


@pytest.mark.parametrize(("point", "layout"), CASES)
def test_a_crash_between_steps_is_recovered_by_the_retry(
    point: str,
    layout: str,
    spark: Any,
    broker: str,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = "side_table" if point == "after_late_registration" else "amend"
    config, settings = fresh_table(settings, tmp_path, late_policy=policy, output__layout=layout)
    create_topic(broker, config.source.topic, 2)
    monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    crashed: list[str] = []

    def step(name: str, action: Callable[[str], Any], run: str) -> None:
        try:
            action(run)
        except InjectedFault:
            crashed.append(name)
            monkeypatch.delenv("TIDEMARK_FAIL_AT")
            action(f"{run}-retry" if name.startswith("dump") else run)  # another run adopts the batch

    produced = produce(
        broker,
        config.source.topic,
        records(
            [(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)] + [(0, at(11, 50)), (1, at(11, 45))]
        ),
    )
    step("dump-1", lambda r: run_dump(spark, config, settings, r, at(12)), "run-1")
    step("seal-1", lambda r: run_seal(spark, config, settings, r), "run-1")
    produced += produce(
        broker, config.source.topic, records([(0, at(10, 30)), (0, at(12, 50)), (1, at(12, 55))], prefix="b")
    )
    step("dump-2", lambda r: run_dump(spark, config, settings, r, at(13, 10)), "run-2")
    step("seal-2", lambda r: run_seal(spark, config, settings, r), "run-2")
    assert crashed, f"{point} was never reached"

    state = CommitLog(settings.state_dir, config.table).state()
    journal = HourJournal(settings.state_dir, config.table).state()
    versioned = layout == "versioned"
    rows, dirty, _ = landed(settings, config.table, journal if versioned else None)
    late = late_landed(settings, config.table)
    if versioned and policy == "side_table":  # the late partition's version, not its _open files
        late = Counter(
            (r[0], r[1])
            for r in spark.table(config.late_table).select("_mq_partition", "_mq_offset").collect()
        )
    expected = Counter((p, o) for p, o, _ in produced)
    if policy == "side_table":
        assert rows + dirty + late == expected
    else:  # amend: the late row is in its hour, and its late file is gone with the fold
        assert rows + dirty == expected, (rows + dirty - expected, expected - rows - dirty)
        assert late == Counter(), "a folded late row left in <table>__late: a second place to read it"
    ten = journal.hours["2026-11-22T10"]
    assert ten.rows == state.rows_per_hour["dt=2026-11-22/hr=10"] + (1 if policy == "amend" else 0)
    assert journal.hours["2026-11-22T11"].rows == state.rows_per_hour["dt=2026-11-22/hr=11"]
