"""Re-compaction on the real broker, real Spark and the Derby metastore (``seal/recompact.py``):
an hour that two late amendments left in three files is written again as one, with exactly
the rows it held, through a kill inside the write and one after the swap (in-process,
TIDEMARK_FAIL_MODE=raise), each repaired by the retry; an hour already in one file is left
alone, and the lake check passes."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import at, fresh_table
from tidemark.errors import InjectedFault
from tidemark.ingest.dump import run_dump
from tidemark.observe.report import render_report, report_data
from tidemark.observe.status import table_status
from tidemark.observe.verify import run_verify
from tidemark.seal.recompact import run_compaction
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.journal import EntryKind, HourJournal
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

TEN, ELEVEN = "2026-11-22T10", "2026-11-22T11"


def hour_rows(spark: Any, table: str, hr: str) -> Counter[tuple[int, int]]:
    """(MQ partition, offset) of the hour's rows, as a reader of the metastore's table finds them."""
    spark.catalog.refreshTable(table)
    found = spark.sql(f"SELECT _mq_partition, _mq_offset FROM `{table}` WHERE hr = '{hr}'").collect()
    return Counter((r[0], r[1]) for r in found)


def test_an_amended_hour_is_compacted_with_its_rows_through_kills_and_a_whole_hour_is_left_alone(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, settings = fresh_table(settings, tmp_path, late_policy="amend")
    table = config.table
    create_topic(broker, table, 2)
    produce(broker, table, records([(p, at(h, m)) for p in (0, 1) for h in (10, 11) for m in (5, 35)]))
    produce(broker, table, records([(0, at(12, 40)), (1, at(12, 40))], prefix="wm"))
    run_dump(spark, config, settings, "run-0", at(12, 50))
    run_seal(spark, config, settings, "run-0")
    for round_ in (1, 2):  # a late record of hour 10 each round: an amend adds a file
        produce(broker, table, records([(round_ % 2, at(10, 50))], prefix=f"late{round_}"))
        run_dump(spark, config, settings, f"run-{round_}", at(12, 50 + round_))
        run_seal(spark, config, settings, f"run-{round_}")
    journal = HourJournal(settings.state_dir, table)
    amended = journal.state().hours[TEN]
    assert (amended.kind, amended.version, len(amended.files), amended.rows) == (EntryKind.AMEND, 3, 3, 6)
    before = {hr: hour_rows(spark, table, hr) for hr in ("10", "11")}
    assert sum(before["10"].values()) == 6

    assert run_compaction(spark, config, settings, "dry", dry_run=True).compacted == []
    assert journal.state().hours[TEN] == amended

    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    for point in ("mid_rebuild", "after_swap"):  # inside the write; after the swap, before the journal
        monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
        with pytest.raises(InjectedFault):
            run_compaction(spark, config, settings, "maintain-1")
        monkeypatch.delenv("TIDEMARK_FAIL_AT")
        assert {hr: hour_rows(spark, table, hr) for hr in ("10", "11")} == before  # never half-compacted
    result = run_compaction(spark, config, settings, "maintain-1")
    assert [(c["hour"], c["files"]) for c in result.compacted] == [(TEN, 1)]
    compacted = journal.state().hours[TEN]
    assert (compacted.kind, compacted.version, len(compacted.files)) == (EntryKind.COMPACT, 4, 1)
    assert (compacted.rows, compacted.late, compacted.folded_through_batch) == (
        amended.rows,
        amended.late,
        amended.folded_through_batch,
    )
    assert {hr: hour_rows(spark, table, hr) for hr in ("10", "11")} == before
    assert journal.state().hours[ELEVEN].version == 1  # one file already: left alone
    assert run_compaction(spark, config, settings, "maintain-2").compacted == []
    steps = table_status(config, settings)["maintenance"]
    assert (steps["compact"]["run_id"], steps["compact"]["hours_compacted"]) == ("maintain-2", 0)
    # the table's shape as the step listed it: the bytes of each hour's current files, on the page
    data = report_data(config, settings)
    current = journal.state().hours
    assert data["bytes_per_hour"] == {
        key: sum((Path(settings.warehouse) / f).stat().st_size for f in entry.files)
        for key, entry in current.items()
    }
    assert data["bytes_per_hour"][TEN] > 0 and "Files and MiB per sealed hour" in render_report(data)
    run_verify(spark, config, settings, datetime.now(UTC))
