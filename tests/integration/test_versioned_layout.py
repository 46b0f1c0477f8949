"""``output.layout: versioned`` on the local disk (``hourcommit/__init__.py``): every version
of an hour in a directory of its own, the partition switched to it, a replaced one kept for
``output.version_retention``. A query that listed an hour's files before an amend and a
rebuild reads them whole after both; once the grace has passed, the next seal's collector
deletes them; a table sealed in one layout refuses the other. The protocol's crash points on
this layout: test_protocol_points."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import at, fresh_table
from tidemark.errors import ConfigError
from tidemark.ingest.dump import run_dump
from tidemark.observe.verify import run_verify
from tidemark.seal.rebuild import run_rebuild
from tidemark.seal.recompact import run_compaction
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.integration

TEN = "2026-11-22T10"


def test_a_query_planned_on_a_replaced_version_reads_it_whole_until_the_grace_has_passed(
    spark: Any, broker: str, settings: Settings, tmp_path: Path
) -> None:
    config, settings = fresh_table(
        settings, tmp_path, late_policy="amend", output__layout="versioned", output__version_retention="1h"
    )
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 2)
    produce(broker, topic, records([(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 6)]))
    produce(broker, topic, records([(0, at(11, 40)), (1, at(11, 45))], prefix="wm"))
    run_dump(spark, config, settings, "run-1", at(11, 50))
    assert run_seal(spark, config, settings, "run-1").sealed == [TEN]

    def hour_ten() -> Any:
        return spark.table(table).where("hr = '10'")

    planned = hour_ten().inputFiles()  # a query's plan: the files it will read
    assert planned and all("/_versions/v" in f for f in planned), planned
    assert hour_ten().count() == 20

    # A late record amends hour 10 (version 2), then a rebuild writes version 3.
    produce(broker, topic, records([(0, at(10, 59))], prefix="late"))
    run_dump(spark, config, settings, "run-2", at(12, 10))
    assert run_seal(spark, config, settings, "run-2").amended == [TEN]
    amended = hour_ten().inputFiles()
    assert hour_ten().count() == 21 and not set(amended) & set(planned)
    run_rebuild(spark, config, settings, "rebuild-1", [TEN])
    journal = HourJournal(settings.state_dir, table)
    assert (journal.state().hours[TEN].version, hour_ten().count()) == (3, 21)
    # the queries that planned on versions 1 and 2 finish with the rows they planned on
    assert spark.read.parquet(*planned).count() == 20
    assert spark.read.parquet(*amended).count() == 21
    run_verify(spark, config, settings, datetime.now(UTC))  # kept versions are no orphans

    # The grace over (1 s here, in processing and wall-clock time since a collector first
    # found the version unreferenced): version 1 (found by the amend's seal) goes with the
    # next seal, version 2 (replaced by the rebuild, found by that seal) with the next collection.
    brief = config.model_copy(
        update={"output": config.output.model_copy(update={"version_retention": timedelta(seconds=1)})}
    )

    def gone(files: list[str]) -> bool:
        return not [f for f in files if Path(f.removeprefix("file:")).exists()]

    time.sleep(1.5)
    produce(broker, topic, records([(0, at(12, 40)), (1, at(12, 45))], prefix="next"))
    run_dump(spark, brief, settings, "run-3", at(13, 10))
    run_seal(spark, brief, settings, "run-3")
    assert gone(planned) and not gone(amended)
    # the maintenance DAG's compact step collects too (processing time moved by a dump)
    time.sleep(1.5)
    produce(broker, topic, records([(0, at(13, 40)), (1, at(13, 45))], prefix="after"))
    run_dump(spark, brief, settings, "run-4", at(14, 10))
    compacted = run_compaction(spark, brief, settings, "maintain-1")
    assert compacted.compacted == [] and len(compacted.versions_deleted) == 1 and gone(amended)

    # The layout is the table's from its first sealed hour: in place is refused, by name.
    in_place = config.model_copy(update={"output": config.output.model_copy(update={"layout": "in_place"})})
    refused = r"output\.layout: in_place, but the sealed hours are versioned"
    with pytest.raises(ConfigError, match=refused):
        run_seal(spark, in_place, settings, "run-4")
    with pytest.raises(ConfigError, match=refused):  # nor a dump: its publisher follows the layout
        run_dump(spark, in_place, settings, "run-5", at(14, 20))
    assert run_seal(spark, brief, settings, "run-4").sealed == ["2026-11-22T12"]
    assert hour_ten().count() == 21
    run_verify(spark, brief, settings, datetime.now(UTC))
