"""Data Docs off the seal's critical path: the seal keeps an hour's results without importing
GX; one render writes every pending page where the seal said it would be, and again only for
an hour judged since."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tidemark.seal import data_docs
from tidemark.seal.data_docs import page_of, pending, record, render_pending

HOUR_10 = datetime(2026, 11, 22, 10, tzinfo=UTC)
HOUR_11 = datetime(2026, 11, 22, 11, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit


def results(unique: bool) -> list[dict[str, object]]:
    return [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "event_id"}, "success": True,
         "result": {"element_count": 3, "unexpected_count": 0}},
        {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "event_id"}, "success": unique,
         "result": {"element_count": 3, "unexpected_count": 0 if unique else 2,
                    "partial_unexpected_list": [] if unique else ["e-7", "e-7"]}},
    ]  # fmt: skip


def test_one_render_writes_every_pending_page_where_the_seal_named_it(tmp_path: Path) -> None:
    page_10 = record(tmp_path, "events", "2026-11-22T10", HOUR_10, results(unique=False))
    page_11 = record(tmp_path, "events", "2026-11-22T11", HOUR_11, results(unique=True))
    assert page_10 == "validations/events/2026-11-22T10/20261122T100000.000000Z/hour.html"
    assert page_10 == page_of("events", "2026-11-22T10", HOUR_10)
    assert [p.name for p in pending(tmp_path)] == ["2026-11-22T10.json", "2026-11-22T11.json"]

    assert render_pending(tmp_path) == [page_10, page_11]
    text = (tmp_path / page_10).read_text()
    assert "event_id" in text and "e-7" in text and "unique" in text.lower()
    assert (tmp_path / "static").is_dir()  # the page's stylesheets, copied once
    assert pending(tmp_path) == [] and render_pending(tmp_path) == []

    # a rebuild judges hour 11 again: only its page is rendered again
    later = (tmp_path / page_11).stat().st_mtime + 5
    record(tmp_path, "events", "2026-11-22T11", HOUR_11, results(unique=False))
    os.utime(data_docs.results_path(tmp_path, "2026-11-22T11"), (later, later))
    assert render_pending(tmp_path) == [page_11]
    assert "e-7" in (tmp_path / page_11).read_text()


def test_no_results_nothing_to_render(tmp_path: Path) -> None:
    assert render_pending(tmp_path) == [] and render_pending(tmp_path / "missing") == []


def test_the_gate_of_a_table_with_only_default_checks_never_imports_gx(tmp_path: Path) -> None:
    """In a fresh interpreter, as a seal job's driver is: the gate keeps the results and names the
    page, and Great Expectations stays unimported."""
    script = textwrap.dedent(
        f"""
        import json, sys
        from datetime import datetime, UTC
        from pathlib import Path
        from tidemark.catalog import load_table
        from tidemark.seal.checks import CheckResult
        from tidemark.seal.quality import gate
        from tidemark.settings import Settings
        from tidemark.time.hours import Hour
        config = load_table("events", Settings.from_env())
        assert not config.quality.expectations
        hour = Hour(datetime(2026, 11, 22, 10, tzinfo=UTC), "UTC")
        checks = [CheckResult("expect_column_values_to_not_be_null", {{"column": "event_id"}}, True, {{}})]
        outcome = gate(config, hour, None, Path({str(tmp_path)!r}), defaults=checks)
        print(json.dumps([outcome.status, outcome.data_docs, "great_expectations" in sys.modules]))
        """
    )
    env = {**os.environ, "TIDEMARK_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    status, page, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert status == "passed" and page == page_of("events", "2026-11-22T10", HOUR_10)
    assert imported is False
    assert (tmp_path / "results" / "2026-11-22T10.json").is_file()
