"""A table stored as ORC (``output.format: orc``) through the seal, an amend of late rows and
a rebuild, on the local disk and on S3: every file readers see is ORC, the metastore table is
STORED AS ORC, and Spark SQL reads every row by name, each at its own offset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import at, fresh_table
from tidemark.errors import SchemaEvolutionError
from tidemark.evolution import SchemaHistory
from tidemark.ingest.dump import run_dump
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.tablefs import Store
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration


def test_an_orc_table_seals_amends_and_rebuilds(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    """On the local disk, read through the metastore (tests/e2e/test_orc_s3.py: on S3)."""
    config, settings = fresh_table(
        settings, tmp_path, late_policy="amend", output__format="orc", output__compression="zstd"
    )
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 2)
    sent = produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 10)]))
    run_dump(spark, config, settings, "run-1", at(11))
    produce(broker, topic, records([(0, at(11, 40)), (1, at(11, 30))], prefix="b"))
    run_dump(spark, config, settings, "run-2", at(12))
    assert "2026-11-22T10" in run_seal(spark, config, settings, "run-2").sealed

    def hour_rows() -> dict[tuple[int, int], str]:
        spark.catalog.refreshTable(table)
        frame = spark.sql(f"SELECT _mq_partition, _mq_offset, event_id FROM `{table}` WHERE hr = '10'")
        return {(r[0], r[1]): r[2] for r in frame.collect()}

    def visible_files() -> list[str]:
        location = spark.sql(f"DESCRIBE FORMATTED `{table}` PARTITION (dt='2026-11-22', hr='10')")
        where = next(r[1] for r in location.collect() if r[0] == "Location")
        store = Store.of(where)
        return [f for f in store.all_files("") if not f.rsplit("/", 1)[-1].startswith(("_", "."))]

    assert hour_rows() == {
        (p, o): m.value and __import__("json").loads(m.value)["event_id"] for p, o, m in sent
    }
    files = visible_files()
    assert files and all(f.endswith(".orc") for f in files), files
    described = {r[0]: r[1] for r in spark.sql(f"DESCRIBE FORMATTED `{table}`").collect()}
    assert "orc" in described["InputFormat"].lower()

    late = produce(broker, topic, records([(0, at(10, 15)), (1, at(10, 45))], prefix="late"))
    run_dump(spark, config, settings, "run-3", at(12, 10))
    assert run_seal(spark, config, settings, "run-3").amended == ["2026-11-22T10"]
    after = hour_rows()
    assert len(after) == 14 and {after[(p, o)] for p, o, _ in late} == {"late-0", "late-1"}
    assert all(f.endswith(".orc") for f in visible_files())

    (done,) = run_rebuild(spark, config, settings, "rebuild-1", ["2026-11-22T10"]).hours
    assert done["status"] == "rebuilt"
    assert hour_rows() == after and all(f.endswith(".orc") for f in visible_files())


def test_the_format_of_a_table_never_changes(settings: Settings, tmp_path: Path) -> None:
    config, settings = fresh_table(settings, tmp_path)
    SchemaHistory(settings.state_location, config.table).ensure(config, "run-1")
    orc = config.model_copy(update={"output": config.output.model_copy(update={"format": "orc"})})
    with pytest.raises(SchemaEvolutionError, match=r"output\.format: parquet -> orc"):
        SchemaHistory(settings.state_location, config.table).check(orc)
