"""The ingestion health page of a table: one static HTML file, readable without a server.

Its source of truth is the state store (commit log and partition journal), never logs:

- watermark per MQ partition and the global ready time, over processing time;
- rows and late rows per hour;
- late rate per event hour, and dirty rate per processing hour (dirty records have no
  trustworthy event time);
- freshness per hour: registration time minus hour end;
- quality per hour, with a link to the hour's GX Data Docs page.

``report_data`` gathers (I/O), ``render_report`` draws (pure: data in, HTML out).
"""

from __future__ import annotations

import html
import logging
import os
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tidemark.config import TableConfig
from tidemark.fresh import describe_fresh, fresh_status
from tidemark.observe.alerts import describe_overdue, overdue_hours, recent_failures
from tidemark.observe.batch_table import batch_rows, render_batches
from tidemark.observe.broker_side import broker_side, describe
from tidemark.observe.status import render_snapshot, render_stream, snapshots, stream_summary
from tidemark.seal.data_docs import render_pending
from tidemark.settings import Settings
from tidemark.state.commitlog import CommitLog, LogState
from tidemark.state.journal import JournalState
from tidemark.state.layout import DATA_DOCS, data_docs_dir
from tidemark.state.maintenance_log import describe_steps, last_shape, last_steps
from tidemark.table import Table
from tidemark.time.hours import parse_key

log = logging.getLogger(__name__)

MAX_BATCHES = 2_000  # the watermark plot covers the most recent batches
MAX_FAILURES_SHOWN = 10


def report_path(settings: Settings, table: str) -> Path:
    return settings.state_dir / table / "reports" / "health.html"


def report_data(config: TableConfig, settings: Settings, as_of: datetime | None = None) -> dict[str, Any]:
    """Everything the page shows, as plain data; overdue hours are judged at ``as_of`` (the
    page is drawn for a person looking now: the wall clock by default)."""

    as_of = as_of or datetime.now(UTC)
    table = Table.read(config, settings)
    table_state = table.state
    commit_log = table_state.commit_log
    state = commit_log.state()
    watermarks, ready, dirty_by_hour = _batch_series(commit_log, state)
    journal = table_state.journal.state()
    return {
        "table": config.table,
        "topic": config.source.topic,
        "batches": state.batches,
        "last_batch": state.last_committed,
        "rows": state.rows,
        "dirty": state.dirty,
        "tombstones": state.tombstones,
        "lost_to_retention": state.lost_to_retention,
        "without_message": state.without_message,
        "late": state.late,
        "ready_time": state.ready.time if state.ready else None,
        "sealed_through": journal.sealed_through,
        "fresh": describe_fresh(fresh_status(table, state.last_committed)),
        "retention": str(config.retention.hours) if config.retention.hours else None,
        "oldest_hour_kept": journal.oldest_hour,
        "dropped_by_retention": journal.dropped,
        "maintenance": describe_steps(last_steps(table_state.journal.root)),
        "files_per_hour": {k: len(e.files) for k, e in sorted(journal.hours.items()) if e.published},
        "bytes_per_hour": last_shape(table_state.journal.root),
        "watermarks": {p: watermarks[p] for p in sorted(watermarks)},
        "ready": ready,
        "rows_per_hour": dict(sorted(state.rows_per_hour.items())),
        "late_per_hour": dict(sorted(state.late_per_hour.items())),
        "dirty_rate": {h: (d / r if r else 0.0) for h, (d, r) in sorted(dirty_by_hour.items())},
        "late_rate": {
            h: late / (late + state.rows_per_hour.get(h, 0))
            for h, late in sorted(state.late_per_hour.items())
            if late
        },
        "hours": _hours(config, journal, state),
        "as_of": as_of.isoformat(),
        "overdue": (overdue := overdue_hours(config, settings, as_of)),
        "overdue_ranges": describe_overdue(config, overdue),
        "failures": recent_failures(settings, config.table)[:MAX_FAILURES_SHOWN],
        "pending": pending.describe() if (pending := commit_log.pending_plan(state)) else None,
        "writer": render_stream(stream_summary(config, settings)),
        "broker": _broker_lines(config, settings, state.end_offsets),
        "snapshots": [render_snapshot(snap) for snap in snapshots(config, settings)],
        "decisions": [r.describe() for r in table_state.audit.records()][-MAX_FAILURES_SHOWN:],
        "batch_table": batch_rows(commit_log, state),
    }


def _batch_series(
    commit_log: CommitLog, state: LogState
) -> tuple[dict[int, list[tuple[str, str]]], list[tuple[str, str]], dict[str, list[int]]]:
    """Over the last ``MAX_BATCHES`` commits: each MQ partition's watermark and the global
    ready time against processing time, and (dirty, read) per processing hour."""
    watermarks: dict[int, list[tuple[str, str]]] = defaultdict(list)
    ready: list[tuple[str, str]] = []
    dirty_by_hour: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for commit in commit_log.iter_commits(max(0, state.last_committed + 1 - MAX_BATCHES)):
        for w in commit.watermarks:
            if w.watermark:
                watermarks[w.mq_partition].append((commit.processing_time, w.watermark))
        if commit.ready is not None and commit.ready.time:
            ready.append((commit.processing_time, commit.ready.time))
        processing_hour = commit.processing_time[:13]
        dirty_by_hour[processing_hour][0] += commit.dirty
        dirty_by_hour[processing_hour][1] += sum(p.read for p in commit.mq_partitions)
    return watermarks, ready, dirty_by_hour


def _hours(config: TableConfig, journal: JournalState, state: LogState) -> list[dict[str, Any]]:
    """The journal's hours, oldest first: state, version, rows, late rows, freshness, quality."""
    hours = []
    zone = config.event_time.time_zone
    for key, entry in sorted(journal.hours.items(), key=lambda kv: kv[1].hour_start):
        registered = entry.published
        freshness = (
            (datetime.fromisoformat(entry.sealed_at) - datetime.fromisoformat(entry.hour_end)).total_seconds()
            / 60
            if registered
            else None
        )
        hours.append(
            {
                "hour": key,
                "state": entry.kind,
                "version": entry.version,
                "rows": entry.rows,
                # late rows of the hour in either policy (side table or folded in)
                "late": max(entry.late, state.late_per_hour.get(parse_key(key, zone).path, 0)),
                "freshness_minutes": round(freshness, 1) if freshness is not None else None,
                "quality": entry.quality.get("status", "not_evaluated"),
                "failures": list(entry.quality.get("failures", [])),
                "data_docs": entry.quality.get("data_docs"),
            }
        )
    return hours


def _figure(fig: Any, first: bool) -> str:
    fig.update_layout(height=320, margin={"l": 50, "r": 20, "t": 50, "b": 40})
    # plotly.js is inlined once (the page must work on a closed network), the rest reuse it
    return str(fig.to_html(full_html=False, include_plotlyjs=first))


def _hour_label(path_key: str) -> str:
    """``dt=2026-11-22/hr=10`` -> ``2026-11-22 10``."""
    parts = dict(p.split("=", 1) for p in path_key.split("/"))
    return f"{parts.get('dt', '?')} {parts.get('hr', '?')}"


def render_report(data: dict[str, Any], docs_prefix: str = f"../{DATA_DOCS}/") -> str:
    """The health page as one HTML document (plotly.js inlined)."""
    plots = "\n".join(
        f'<section class="plot">{_figure(f, i == 0)}</section>' for i, f in enumerate(_figures(data))
    )
    return _page(data, plots, _hour_rows(data, docs_prefix), _alerts(data))


def _figures(data: dict[str, Any]) -> list[Any]:
    """The plots: watermarks and the ready time, rows and late rows, late and dirty rates,
    freshness."""
    import plotly.graph_objects as go

    figures = []
    wm = go.Figure()
    for partition, points in data["watermarks"].items():
        wm.add_trace(
            go.Scatter(x=[p for p, _ in points], y=[w for _, w in points], name=f"partition {partition}")
        )
    wm.add_trace(
        go.Scatter(
            x=[p for p, _ in data["ready"]],
            y=[r for _, r in data["ready"]],
            name="global ready time",
            line={"dash": "dash"},
        )
    )
    wm.update_layout(title="Watermark per MQ partition (x: processing time, y: event time)")
    figures.append(wm)
    volume = go.Figure()
    volume.add_trace(
        go.Bar(
            x=[_hour_label(h) for h in data["rows_per_hour"]],
            y=list(data["rows_per_hour"].values()),
            name="rows",
        )
    )
    volume.add_trace(
        go.Bar(
            x=[_hour_label(h) for h in data["late_per_hour"]],
            y=list(data["late_per_hour"].values()),
            name="late rows",
        )
    )
    volume.update_layout(
        title="Rows and late rows per hour (event time)", barmode="group", xaxis_type="category"
    )
    figures.append(volume)
    rates = go.Figure()
    rates.add_trace(
        go.Bar(
            x=[_hour_label(h) for h in data["late_rate"]],
            y=[r * 100 for r in data["late_rate"].values()],
            name="late % of the hour's rows (event hour)",
        )
    )
    rates.add_trace(
        go.Bar(
            x=[h.replace("T", " ") for h in data["dirty_rate"]],
            y=[r * 100 for r in data["dirty_rate"].values()],
            name="dirty % of records read (processing hour)",
        )
    )
    top = max([*data["late_rate"].values(), *data["dirty_rate"].values(), 0.0]) * 100
    rates.update_layout(title="Late and dirty rates per hour", xaxis_type="category", barmode="group")
    # from 0 %: with no late or dirty record plotly's own axis would run from -1 to 1
    rates.update_yaxes(range=[0, max(1.0, top * 1.1)], ticksuffix=" %")
    figures.append(rates)
    fresh = [h for h in data["hours"] if h["freshness_minutes"] is not None]
    freshness = go.Figure(
        go.Bar(x=[h["hour"] for h in fresh], y=[h["freshness_minutes"] for h in fresh], name="minutes")
    )
    freshness.update_layout(title="Freshness: minutes from hour end to registration", xaxis_type="category")
    figures.append(freshness)
    shape = go.Figure(
        go.Bar(x=list(data["files_per_hour"]), y=list(data["files_per_hour"].values()), name="files")
    )
    sized = data["bytes_per_hour"]  # as the last maintenance run's compaction step listed them
    shape.add_trace(go.Scatter(x=list(sized), y=[b / 2**20 for b in sized.values()], name="MiB", yaxis="y2"))
    shape.update_layout(
        title="Files and MiB per sealed hour (late amends add a file each; compaction merges them back)",
        xaxis_type="category",
        yaxis2={"overlaying": "y", "side": "right", "title": "MiB"},
    )
    figures.append(shape)
    return figures


def _hour_rows(data: dict[str, Any], docs_prefix: str) -> str:
    """The hours table's rows, the newest first, each with its Data Docs link."""
    rows = []
    for h in reversed(data["hours"]):
        docs = (
            f'<a href="{html.escape(docs_prefix + h["data_docs"])}">Data Docs</a>'
            if h.get("data_docs")
            else ""
        )
        rows.append(
            f'<tr class="hour {html.escape(h["state"])}"><td>{html.escape(h["hour"])}</td>'
            f"<td>{html.escape(h['state'])} v{h['version']}</td><td>{h['rows']}</td><td>{h['late']}</td>"
            f"<td>{'' if h['freshness_minutes'] is None else h['freshness_minutes']}</td>"
            f"<td>{html.escape(h['quality'])}</td><td>{html.escape('; '.join(h['failures']))}</td><td>{docs}</td></tr>"
        )
    return "".join(rows)


def _alerts(data: dict[str, Any]) -> str:
    """Overdue hours, the pending batch, recent task failures and operator decisions."""
    e = html.escape
    overdue = data["overdue"]
    overdue_line = (
        f"<b>{len(overdue)} hour(s) past their seal deadline</b> at {e(data['as_of'])}:<br>"
        + "<br>".join(e(line) for line in data.get("overdue_ranges", []))
        if overdue
        else f"No hour past its seal deadline at {e(data['as_of'])}."
    )
    failure_items = "".join(
        f"<li>{e(f['dag_id'])}.{e(f['task_id'])} run {e(f['run_id'])} try {f['try_number']}: {e(f['error'])}</li>"
        for f in data["failures"]
    )
    decision_items = "".join(f"<li>{e(d)}</li>" for d in reversed(data.get("decisions", [])))
    pending = data.get("pending")
    alerts = (
        f'<section id="alerts"><h2>Alerts</h2><p id="overdue">{overdue_line}</p>'
        + (f'<p id="pending">Pending batch (the next run completes it): {e(pending)}</p>' if pending else "")
        + (f'<p>Recent task failures:</p><ul id="failures">{failure_items}</ul>' if failure_items else "")
        + (
            f'<p>Operator decisions (audit log):</p><ul id="decisions">{decision_items}</ul>'
            if decision_items
            else ""
        )
        + "</section>"
    )
    return alerts


def _page(data: dict[str, Any], plots: str, rows: str, alerts: str) -> str:
    """The document around the parts: the summary line, the writer, the snapshots."""
    e = html.escape
    writer = "<br>".join(e(line.strip()) for line in data.get("writer", []))
    snapshot_lines = "<br>".join(e(line) for line in data.get("snapshots", []))
    broker_lines = "<br>".join(e(line.strip()) for line in data.get("broker", []))
    summary = (
        f"topic <b>{e(data['topic'])}</b>; {data['batches']} batches (last {data['last_batch']}); rows {data['rows']}, "
        f"dirty {data['dirty']}, tombstones {data['tombstones']}, late {data['late']}, "
        f"offsets without a message {data.get('without_message', 0)}, "
        f"offsets lost to retention {data.get('lost_to_retention', 0)}; global ready time <b>{e(str(data['ready_time']))}</b>; "
        f"sealed through <b>{e(str(data['sealed_through']))}</b>; {e(data.get('fresh', ''))}"
    )
    maintenance = "<br>".join(e(line) for line in data.get("maintenance", []))
    if maintenance:
        summary += f"<br>last maintenance:<br>{maintenance}"
    if data.get("retention"):
        summary += (
            f"; retention {e(data['retention'])}: oldest hour kept <b>{e(str(data['oldest_hour_kept']))}</b>, "
            f"dropped by retention {data['dropped_by_retention']} hours"
        )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tidemark health: {e(data["table"])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }}
table {{ border-collapse: collapse; margin-top: 1rem; font-size: 0.9rem; }}
td, th {{ border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; }}
tr.quarantine td {{ background: #fde2e2; }}
tbody.batch {{ border-top: 2px solid #888; }}
tbody.broken td, tbody:target td {{ background: #fff4c2; }}
tr.sum td {{ color: #555; font-size: 0.8rem; }}
section.plot {{ max-width: 1100px; }}
#overdue b {{ color: #b00020; }}
</style></head>
<body>
<h1>Ingestion health: {e(data["table"])}</h1>
<p id="summary">{summary}</p>
<p id="writer">{writer}</p>
<p id="broker">{broker_lines}</p>
<p id="snapshots">{snapshot_lines}</p>
{alerts}
{plots}
{render_batches(data.get("batch_table", []))}
<h2>Hours</h2>
<table id="hours">
<thead><tr><th>hour</th><th>state</th><th>rows</th><th>late</th><th>freshness (min)</th><th>quality</th>
<th>failures</th><th>report</th></tr></thead>
<tbody>
{rows}
</tbody></table>
</body></html>
"""


def _broker_lines(config: TableConfig, settings: Settings, end_offsets: dict[int, int]) -> list[str]:
    """The broker's side in words: open transactions, offsets at risk or lost (``broker_side``)."""
    side = broker_side(config, settings, end_offsets)
    if side["error"]:
        return [f"broker: {side['error']}"]
    return describe(side, config.table) or [
        "broker: no open transaction holds records back; no offset at risk"
    ]


def write_report(
    config: TableConfig, settings: Settings, out: Path | None = None, as_of: datetime | None = None
) -> Path:
    """Gather, render and write the page (default ``<state>/<table>/reports/health.html``),
    after the hours' Data Docs pages it links to that are not rendered yet."""
    target = out or report_path(settings, config.table)
    docs = data_docs_dir(settings.state_dir, config.table)
    render_pending(docs)
    prefix = Path(_relative(docs, target.parent)).as_posix() + "/"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_report(report_data(config, settings, as_of), docs_prefix=prefix))
    log.info("%s: health report written to %s", config.table, target)
    return target


def _relative(path: Path, start: Path) -> str:
    return os.path.relpath(path.resolve(), start.resolve())
