"""An Iceberg CDC snapshot of format 3 whose MERGE is merge-on-read (``cdc.iceberg_format_version:
3``, ``cdc.merge_mode: merge-on-read``): each merge writes deletion vectors beside the files it
touches and rewrites none of them; an updated row keeps its identity (``_row_id``), a new row
gets a new one; Spark by name and tag, pyiceberg and DuckDB read the state the source holds.
A copy-on-write table switched to merge-on-read takes the mode at its next merge."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.orders import (
    bootstrapped,
    duckdb_snapshot,
    iceberg_name,
    snapshot,
    three_hours_of_changes,
    truth,
)
from tests.helpers.tables import at
from tidemark.iceberg_catalog import identifier, open_catalog
from tidemark.settings import Settings
from tidemark.snapshot.merge import run_merge
from tidemark_dev.generator import state_after

pytestmark = pytest.mark.integration

LABELS = ("2026-11-22T10", "2026-11-22T11", "2026-11-22T12")


def test_a_v3_merge_on_read_snapshot_writes_deletion_vectors_and_keeps_row_ids(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings, source_state, _ = bootstrapped(
        spark,
        broker,
        settings,
        tmp_path,
        "iceberg",
        cdc__iceberg_format_version=3,
        cdc__merge_mode="merge-on-read",
    )
    name = iceberg_name(settings, config)
    table = open_catalog(settings).load_table(identifier(config.snapshot_table))
    assert table.format_version == 3 and table.properties["write.merge.mode"] == "merge-on-read"
    ids_before = _row_ids(spark, name)
    after = three_hours_of_changes(spark, broker, config, settings, source_state)
    for label in LABELS:
        run_merge(spark, config, settings, f"merge-{label}", label)
    merges = _summaries(settings, config)[1:]  # after the bootstrap's
    assert len(merges) == 3 and all(int(m.get("added-dvs", 0)) > 0 for m in merges), merges
    assert not any(m.get("deleted-data-files") for m in merges)  # no file rewritten

    expected = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(13)], source_state
    )
    assert snapshot(spark, config, LABELS[-1], settings) == truth(expected)  # Spark by name, tag; pyiceberg
    assert duckdb_snapshot(settings, config) == truth(expected)  # DuckDB applies the deletion vectors

    ids_after = _row_ids(spark, name)
    updated = {k for k in ids_before if k in expected and expected[k] != source_state.get(k)}
    assert updated, "the changes updated no bootstrapped key"
    assert {k: ids_after[k] for k in updated} == {k: ids_before[k] for k in updated}  # identity kept
    inserted = set(ids_after) - set(ids_before)
    assert inserted and not {ids_after[k] for k in inserted} & set(ids_before.values())


def test_a_copy_on_write_snapshot_switched_to_merge_on_read_takes_it_at_its_next_merge(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings, source_state, _ = bootstrapped(spark, broker, settings, tmp_path, "iceberg")
    after = three_hours_of_changes(spark, broker, config, settings, source_state)
    run_merge(spark, config, settings, "merge-10", LABELS[0])
    cdc = config.cdc.model_copy(update={"merge_mode": "merge-on-read"}) if config.cdc else None
    switched = config.model_copy(update={"cdc": cdc})
    run_merge(spark, switched, settings, "merge-11", LABELS[1])
    cow, mor = _summaries(settings, config)[-2:]
    assert int(cow.get("deleted-data-files", 0)) > 0 and not cow.get("added-delete-files")
    assert int(mor.get("added-position-delete-files", 0)) > 0 and not mor.get("deleted-data-files"), mor
    table = open_catalog(settings).load_table(identifier(config.snapshot_table))
    assert table.format_version == 2 and table.properties["write.update.mode"] == "merge-on-read"
    expected = state_after(
        [c for c in after if datetime.fromisoformat(c["updated_at"]) < at(12)], source_state
    )
    assert snapshot(spark, switched, LABELS[1], settings) == truth(expected)


def _summaries(settings: Settings, config: Any) -> list[dict[str, str]]:
    """The snapshot table's commit summaries, oldest first."""
    table = open_catalog(settings).load_table(identifier(config.snapshot_table))
    ordered = sorted(table.snapshots(), key=lambda s: s.sequence_number or 0)
    return [dict(s.summary.additional_properties) if s.summary else {} for s in ordered]


def _row_ids(spark: Any, name: str) -> dict[int, int]:
    """{order_id: _row_id} of the table's current state (format 3's row lineage)."""
    return {r.order_id: r._row_id for r in spark.sql(f"SELECT order_id, _row_id FROM {name}").collect()}
