"""The health report in a real browser: sealed and quarantined hours from real Spark, GX and
the metastore, rendered by Debian's headless Chromium from a local HTTP server."""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.tables import AMOUNT_AT_MOST_100, at, fresh_table
from tidemark.errors import QualityGateError
from tidemark.ingest.dump import run_dump
from tidemark.observe.report import report_data, report_path, write_report
from tidemark.seal.sealing import run_seal
from tidemark.settings import Settings
from tidemark_dev.generator import create_topic, produce, records

pytestmark = pytest.mark.e2e

CHROMIUM_FLAGS = [  # from the machine notes: without the network flags it retries closed hosts
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=10000",
]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served on 127.0.0.1 (an ephemeral port) for the browser."""
    root = tmp_path / "site"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def chromium(tmp_path: Path, *args: str) -> str:
    binary = shutil.which("chromium")
    assert binary, "chromium is missing: `make test` installs it (scripts/ensure_chromium.sh)"
    profile = tmp_path / "chromium-profile"
    out = subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout


def offline_data_docs(page_url: str, local: str) -> None:
    """The hour's Data Docs in Chromium with every request off 127.0.0.1 refused: none is made,
    Bootstrap styles the page, Font Awesome draws the pass/fail icons, and no link is dead."""
    from playwright.sync_api import Route, sync_playwright

    outside: list[str] = []
    failed: list[str] = []

    def only_local(route: Route) -> None:
        if route.request.url.startswith(local):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.route("**/*", only_local)
            page.on("requestfailed", lambda request: failed.append(request.url))
            page.on(
                "response", lambda response: failed.append(response.url) if response.status >= 400 else None
            )
            page.goto(page_url, wait_until="networkidle")
            assert outside == [] and failed == [], (outside, failed)
            styled = page.evaluate(
                "getComputedStyle(document.querySelector('.container-fluid, .container, body')).boxSizing"
            )
            assert styled == "border-box"  # bootstrap.min.css applied
            assert page.evaluate("document.fonts.check('900 16px \"Font Awesome 6 Free\"')")
            icons = page.evaluate(
                "Array.from(document.querySelectorAll('i.fas, i.fa')).map(i => getComputedStyle(i, '::before').content)"
            )
            assert icons and all(content not in ("none", "normal", "") for content in icons), icons
            links = page.evaluate("Array.from(document.querySelectorAll('a[href]')).map(a => a.href)")
            for link in links:
                if link.startswith(local) and "#" not in link:
                    assert page.request.get(link).status == 200, link
        finally:
            browser.close()


def test_health_report_renders_plots_and_hours_in_headless_chromium(
    spark: Any, broker: str, settings: Settings, tmp_path: Path, served: tuple[Path, str]
) -> None:
    config, settings = fresh_table(settings, tmp_path, quality__expectations=AMOUNT_AT_MOST_100)
    create_topic(broker, config.source.topic, 2)
    produce(
        broker,
        config.source.topic,
        records(
            [(p, at(10, m)) for p in (0, 1) for m in range(0, 60, 7)]
            + [(0, at(10, 30), {"amount": "999.00"})]  # hour 10 fails the gate
            + [(p, at(11, m)) for p in (0, 1) for m in range(0, 60, 9)]
            + [(0, at(12, 40)), (1, at(12, 35))]
        ),
    )
    run_dump(spark, config, settings, "run-1", at(12, 50))
    with pytest.raises(QualityGateError):
        run_seal(spark, config, settings, "run-1")
    produce(broker, config.source.topic, records([(0, at(11, 59)), (1, at(12, 55))], prefix="late"))
    run_dump(spark, config, settings, "run-2", at(13, 0))  # 11:59 is late for the sealed hour 11

    page = write_report(config, settings, as_of=at(14))  # hour 12 was due at 13:35
    assert page == report_path(settings, config.table)
    data = report_data(config, settings)
    assert data["late_rate"] == {"dt=2026-11-22/hr=11": 1 / 15} and data["batches"] == 2
    assert [(h["hour"], h["late"]) for h in data["hours"]] == [("2026-11-22T10", 0), ("2026-11-22T11", 1)]
    text = page.read_text()
    assert text.count('class="plot"') == 5 and text.count("plotly.js v") == 1  # inlined once
    docs = re.findall(r'href="([^"]+)">Data Docs', text)
    assert len(docs) == 2 and all((page.parent / d).exists() for d in docs)

    # Serve the table's state dir (report + Data Docs) and let the browser render it.
    root, url = served
    shutil.copytree(page.parent.parent, root / "table")
    dom = chromium(tmp_path, "--dump-dom", f"{url}/table/reports/health.html")
    assert dom.count('class="main-svg"') >= 5  # plotly drew every figure
    assert "Watermark per MQ partition" in dom and "Freshness" in dom and "Late and dirty rates" in dom
    hours = re.findall(r'<tr class="hour (\w+)"><td>([^<]+)</td>', dom)
    assert hours == [("seal", "2026-11-22T11"), ("quarantine", "2026-11-22T10")]
    overdue = re.search(r'<p id="overdue">(.*?)</p>', dom)
    assert overdue and "1 hour(s) past their seal deadline" in overdue.group(1)
    assert "2026-11-22T12: due since 2026-11-22T13:35:00+00:00; MQ partition" in overdue.group(1)
    assert report_data(config, settings, as_of=at(13, 30))["overdue"] == {}
    docs_dom = chromium(tmp_path, "--dump-dom", f"{url}/table/reports/{docs[0]}")
    assert "amount" in docs_dom
    # each batch's sum per MQ partition, and its run's anchor (the dump task's extra link)
    batches = re.findall(r'<tbody id="run-([\w-]+)" class="batch" data-batch="(\d+)"', dom)
    assert batches == [("run-2", "1"), ("run-1", "0")]
    sums = re.findall(r'<tr class="sum"><td colspan="\d+">([^<]+)</td>', dom)
    assert sums == [
        "read 2 == rows 1 + dirty 0 + tombstones 0 + late 1: holds; offsets spanned 2 == read 2 + without a message 0",
        "read 35 == rows 35 + dirty 0 + tombstones 0 + late 0: holds; offsets spanned 35 == read 35 + without a message 0",
    ], sums
    partition_rows = re.findall(r"<td>(\d)</td><td>(\d+\.\.\d+)</td>", dom)
    assert partition_rows == [("0", "18..18"), ("1", "17..17"), ("0", "0..17"), ("1", "0..16")], (
        partition_rows
    )
    offline_data_docs(f"{url}/table/reports/{docs[0]}", url)

    screenshot = tmp_path / "health.png"
    chromium(
        tmp_path, f"--screenshot={screenshot}", "--window-size=1280,2200", f"{url}/table/reports/health.html"
    )
    assert screenshot.stat().st_size > 20_000
    print(f"screenshot: {screenshot}")
