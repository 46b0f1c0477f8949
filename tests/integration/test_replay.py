"""The way back from ``<table>__dirty``: after the schema is fixed, a replay lands the dirty
records that are valid now, as a batch of its own (idempotent per run id, audited); every
record stays in exactly one place (rows, dirty or the hidden replayed input); the hour seals
with them, and a rebuild of that hour gives the same rows (the batch's dirty records are not
its rows; the replay's rows come from its kept input). Real broker, Spark and metastore."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import at, fresh_table, landed, registered
from tidemark.config import load_table_file
from tidemark.errors import InjectedFault
from tidemark.ingest.dump import replay_dirty, run_dump
from tidemark.ingest.replay import ReplayError, ReplayRequest
from tidemark.observe.status import table_status
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.audit import AuditLog
from tidemark.state.commitlog import CommitLog
from tidemark.state.layout import Layout
from tidemark_dev.generator import Message, create_topic, produce, records

pytestmark = pytest.mark.integration

DECIDED = datetime(2026, 11, 22, 11, 30, tzinfo=UTC)
HOUR = "2026-11-22T10"


def request_for(
    batches: tuple[int, ...] | None = None, why: str = "event_type may be null now"
) -> ReplayRequest:
    return ReplayRequest(batches, by="ops", reason=why, at=DECIDED)


def hour_rows(spark: Any, table: str) -> list[tuple[Any, ...]]:
    spark.catalog.refreshTable(table)
    frame = spark.sql(f"SELECT * FROM `{table}` WHERE dt = '2026-11-22' AND hr = '10'")
    return sorted(tuple(r) for r in frame.collect())


def fixed(settings: Settings, table: str) -> Any:
    """The table's YAML with ``event_type`` no longer required (the operator's fix)."""
    path = settings.conf_dir / f"{table}.yaml"
    path.write_text(path.read_text().replace("event_type: string not null", "event_type: string"))
    return load_table_file(path)


def test_a_replay_lands_what_the_fixed_schema_accepts_and_the_hour_seals_and_rebuilds_the_same(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(settings, tmp_path, dirty__max_dirty_ratio=0.6)
    table = config.table
    create_topic(broker, config.source.topic, 2)
    clean = [(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)]
    no_type = [(0, at(10, 25), {"event_type": None}), (1, at(10, 35), {"event_type": None})]
    delivered = produce(broker, config.source.topic, records(clean + no_type))
    delivered += produce(
        broker,
        config.source.topic,
        [Message(0, b"not json", "invalid_json", None), Message(1, None, "tombstone", None)],
    )
    produced = Counter((p, o) for p, o, _ in delivered)
    first = run_dump(spark, config, settings, "run-1", at(11))
    assert (first.read, first.rows, first.dirty, first.tombstones) == (16, 12, 3, 1)

    # Before the fix, a replay classifies them again and they stay dirty: still in one place.
    unchanged = replay_dirty(spark, config, settings, "replay-1", request_for(why="try before the fix"))
    assert (unchanged.batch_id, unchanged.rows, unchanged.dirty, unchanged.tombstones) == (1, 0, 3, 1)
    # the tombstone was read again, not produced again: every count still adds up to the files
    counted = table_status(config, settings)
    assert (counted["rows"], counted["dirty"], counted["tombstones"]) == (12, 3, 1)
    layout = Layout(settings, table)
    assert layout.dirty_batches() == [1] and layout.replayed_dirty_dir(0).exists()
    rows, dirty, reasons = landed(settings, table)
    assert rows + dirty == produced
    assert sorted(reasons.values()) == ["invalid_json", "missing_field", "missing_field", "tombstone"]

    # The fix: event_type is nullable. The replay lands the two records as rows of hour 10.
    good = fixed(settings, table)
    with pytest.raises(ReplayError, match=r"batches \[0\] have no dirty records"):
        replay_dirty(spark, good, settings, "replay-x", request_for((0,)))
    done = replay_dirty(spark, good, settings, "replay-2", request_for())
    assert (done.batch_id, done.status, done.read, done.rows, done.dirty, done.tombstones) == (
        2,
        "committed",
        4,
        2,
        1,
        1,
    )
    rows, dirty, reasons = landed(settings, table)
    assert rows + dirty == produced and sorted(reasons.values()) == ["invalid_json", "tombstone"]
    assert replay_dirty(spark, good, settings, "replay-2", request_for()).status == "already_committed"
    log = CommitLog(settings.state_dir, table)
    commit = log.commit(2)
    assert commit is not None and commit.replayed_batches == (1,) and commit.dirty_replaced == 3
    assert commit.tombstones_replaced == 1
    assert commit.rows_per_hour == {"dt=2026-11-22/hr=10": 2} and commit.ranges == ()
    state = log.state()
    assert (state.rows, state.dirty, state.tombstones) == (14, 1, 1)
    assert state.end_offsets == {0: 8, 1: 8}  # offsets untouched by replays
    audit = [r for r in AuditLog(settings.state_dir, table).records() if r.action == "replay"]
    assert [(r.batch_id, r.detail["batches"], r.by) for r in audit] == [(1, [0], "ops"), (2, [1], "ops")]
    assert any("replay batch 2 by ops" in line for line in table_status(good, settings)["decisions"])

    # Later data moves the watermark; the hour seals with the replayed rows, counts matching.
    produce(broker, config.source.topic, records([(0, at(11, 40)), (1, at(11, 40))], prefix="b"))
    run_dump(spark, good, settings, "run-3", at(12))
    sealed = run_seal(spark, good, settings, "run-3")
    assert HOUR in sealed.sealed, sealed
    assert "dt=2026-11-22/hr=10" in registered(spark, table)
    before = hour_rows(spark, table)
    assert len(before) == 14

    # A rebuild re-reads batch 0 from the broker (today's schema would take its two dirty
    # records: they are the replay's, not its) and the replay from its kept input.
    rebuilt = run_rebuild(spark, good, settings, "rebuild-1", [HOUR])
    assert rebuilt.hours[0]["rows"] == 14 and rebuilt.hours[0]["batches"] == [0, 2]
    assert hour_rows(spark, table) == before


@pytest.mark.parametrize("warehouse", ["local", "s3"])
def test_a_replay_killed_at_each_point_is_finished_by_its_retry(
    spark: Any,
    broker: str,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    warehouse: str,
) -> None:
    """On the local disk the replayed input moves to ``_replayed`` after the commit record; on
    S3 (no rename) it is copied there before it and the visible files deleted after it."""
    config, settings = fresh_table(settings, tmp_path, dirty__max_dirty_ratio=0.6)
    if warehouse == "s3":
        lake = f"{request.getfixturevalue('s3')}/{uuid.uuid4().hex[:10]}"
        settings = replace(settings, warehouse=f"{lake}/warehouse", state_uri=f"{lake}/state")
    create_topic(broker, config.source.topic, 1)
    messages = records([(0, at(10, m)) for m in range(0, 60, 5)])
    messages.append(records([(0, at(10, 7), {"event_type": None})], prefix="x")[0])
    produced = Counter((p, o) for p, o, _ in produce(broker, config.source.topic, messages))
    monkeypatch.setenv("TIDEMARK_FAIL_MODE", "raise")
    layout = Layout(settings, config.table)
    for point in ("before_commit_record", "after_commit_record"):  # the dump's own dirty record
        monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
        with pytest.raises(InjectedFault):
            run_dump(spark, config, settings, "run-1", at(11))
        assert not landed(settings, config.table)[1]  # never shown before its batch is finished
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    assert run_dump(spark, config, settings, "run-1", at(11)).dirty == 1
    assert layout.dirty_batches() == [0]
    good = fixed(settings, config.table)
    for point in ("before_commit_record", "after_commit_record"):
        monkeypatch.setenv("TIDEMARK_FAIL_AT", point)
        with pytest.raises(InjectedFault):
            replay_dirty(spark, good, settings, "replay-1", request_for())
        rows, dirty, _ = landed(settings, config.table)
        assert dirty == Counter({(0, 12): 1})  # not retired yet (uncommitted, or killed before)
    monkeypatch.delenv("TIDEMARK_FAIL_AT")
    assert "TIDEMARK_FAIL_AT" not in os.environ
    # another replay finishes the committed one first: batch 0 is not replayed twice
    with pytest.raises(ReplayError, match="no dirty records to replay"):
        replay_dirty(spark, good, settings, "replay-2", request_for())
    done = replay_dirty(spark, good, settings, "replay-1", request_for())
    assert (done.status, done.rows, done.dirty) == ("already_committed", 1, 0)
    rows, dirty, _ = landed(settings, config.table)
    assert rows == produced and not dirty  # every record once, as a row
    assert layout.dirty_batches() == [] and layout.visible_dirty_files(0) == []
    kept = layout.dirty_files_of(0)  # the replay's input, kept for rebuilds
    assert len(kept) == 1 and "/_replayed/batch_id=0/" in kept[0]
    assert layout.store.rows(kept[0].removeprefix(layout.store.root + "/")) == 1
    # the next ingest run plans after the replay, from the committed offsets
    nxt = run_dump(spark, good, replace(settings), "run-2", at(11, 10))
    assert (nxt.batch_id, nxt.read) == (2, 0)
