"""The grace of a replaced hour version on S3 (SeaweedFS), with the jobs as their own
processes: a query that listed hour 10's files before an amend (killed once after its file
moves and retried) and a rebuild reads them whole afterwards; once ``output.version_retention``
has passed in processing and wall-clock time, the seal's collector deletes them. The same
protocol on the local disk: tests/integration/test_versioned_layout.py."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from tests.helpers.jobs import create_metastore, run_job_process
from tests.helpers.tables import PROCESSING, START, fresh_table, read_pairs
from tidemark.faults import EXIT_CODE
from tidemark.settings import Settings
from tidemark.state.journal import HourJournal
from tidemark.state.layout import Layout
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.e2e

TEN = "2026-11-22T10"


def test_a_query_planned_on_a_replaced_version_on_s3_reads_it_whole_until_the_grace_has_passed(
    broker: str, s3: str, settings: Settings, tmp_path: Path
) -> None:
    lake = f"{s3}/{uuid.uuid4().hex[:10]}"
    own = replace(settings, home=tmp_path / "home", warehouse=f"{lake}/warehouse", state_uri=f"{lake}/state")
    config, own = fresh_table(own, tmp_path, late_policy="amend", output__version_retention="1h")
    table, topic = config.table, config.source.topic
    create_topic(broker, topic, 2)
    create_metastore(own)
    store = Layout(own, table).store

    def run(job: str, run_id: str, *extra: str, fail_at: str | None = None) -> int:
        code, _, err = run_job_process(own, job, table, run_id, *extra, fail_at=fail_at)
        assert code == (EXIT_CODE if fail_at else 0), err[-3000:]
        return code

    def at(hours: float) -> list[str]:
        return ["--processing-time", (PROCESSING + timedelta(hours=hours)).isoformat()]

    def rows(files: list[str]) -> int:
        return sum(sum(read_pairs(store, f, "_mq_partition", "_mq_offset").values()) for f in files)

    produce(
        broker, topic, records([(p, START + timedelta(minutes=m)) for p in (0, 1) for m in range(0, 60, 6)])
    )
    produce(broker, topic, records([(p, START + timedelta(minutes=100)) for p in (0, 1)], prefix="wm"))
    run("dump", "run-1", *at(0))
    run("seal", "run-1")
    journal = HourJournal(own.state_location, table)
    planned = list(journal.state().hours[TEN].files)  # a query's plan of hour 10 (version 1)
    assert rows(planned) == 20 and all("/_versions/v0001-" in f for f in planned)

    # a late record amends hour 10 (version 2; the seal killed once after its moves), then a
    # rebuild writes version 3: the query still reads its 20 rows
    produce(broker, topic, records([(0, START + timedelta(minutes=59))], prefix="late"))
    run("dump", "run-2", *at(0.5))
    run("seal", "run-2", fail_at="after_amend_moves")
    run("seal", "run-2")
    amended = list(journal.state().hours[TEN].files)
    run("rebuild", "rebuild-1", "--hours", TEN)
    assert journal.state().hours[TEN].version == 3 and rows(planned) == 20 and rows(amended) == 21

    # the grace over (1 s, processing and wall-clock time since a collector found them): the
    # next seals delete both replaced versions, never the current one
    conf = own.conf_dir / f"{table}.yaml"
    data = yaml.safe_load(conf.read_text())
    data["output"]["version_retention"] = "1s"
    conf.write_text(yaml.safe_dump(data, sort_keys=False))
    for n, hours in ((3, 1.0), (4, 1.5)):
        time.sleep(1.5)
        produce(broker, topic, records([(0, START + timedelta(hours=hours + 1))], prefix=f"next{n}"))
        run("dump", f"run-{n}", *at(hours))
        run("seal", f"run-{n}")
    assert not [f for f in planned + amended if store.exists(f)]
    assert rows(list(journal.state().hours[TEN].files)) == 21
