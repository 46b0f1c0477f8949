"""Each batch's sum on the health page: a row per batch and MQ partition, with the two
reconciliations ``tidemark status`` prints (``read == rows + dirty + tombstones + late`` and
``offsets spanned == read + without a message``), and an anchor per run that the dump task's
extra link points at."""

from __future__ import annotations

import html
import re
from typing import Any

from tidemark.state.batches import Commit
from tidemark.state.commitlog import CommitLog, LogState

BATCHES_SHOWN = 48  # two days of hourly runs


def run_anchor(run_id: str) -> str:
    """The page anchor of a run's batch (``#run-...``): the run id with only safe characters."""
    return "run-" + re.sub(r"[^A-Za-z0-9_-]", "-", run_id)


def batch_rows(commit_log: CommitLog, state: LogState, shown: int = BATCHES_SHOWN) -> list[dict[str, Any]]:
    """The last ``shown`` committed batches, the newest first, each with its MQ partitions."""
    commits = list(commit_log.iter_commits(max(0, state.last_committed + 1 - shown)))
    return [_batch(c) for c in reversed(commits)]


def _batch(commit: Commit) -> dict[str, Any]:
    ranges = {r.mq_partition: r for r in commit.ranges}
    partitions = []
    for p in sorted(commit.mq_partitions, key=lambda p: p.mq_partition):
        span = ranges.get(p.mq_partition)
        spanned = span.size if span is not None else 0
        partitions.append(
            {
                "mq_partition": p.mq_partition,
                "offsets": f"{span.start}..{span.end - 1}" if span is not None and span.size else "",
                "spanned": spanned,
                "read": p.read,
                "rows": p.rows,
                "dirty": p.dirty,
                "tombstones": p.tombstones,
                "late": p.late,
                "without_message": max(0, spanned - p.read) if span is not None else 0,
                "holds": p.read == p.rows + p.dirty + p.tombstones + p.late,
            }
        )
    return {
        "batch_id": commit.batch_id,
        "run_id": commit.committed_by_run,
        "processing_time": commit.processing_time,
        "reconciliation": commit.reconciliation(),
        "holds": all(p["holds"] for p in partitions),
        "partitions": partitions,
    }


COLUMNS = (
    "MQ partition",
    "offsets",
    "spanned",
    "read",
    "rows",
    "dirty",
    "tombstones",
    "late",
    "without a message",
)


def render_batches(batches: list[dict[str, Any]]) -> str:
    """The batches table: a heading row per batch (its run and its sums), a row per MQ partition."""
    e = html.escape
    head = "".join(f"<th>{c}</th>" for c in ("batch", "run", *COLUMNS, "sum"))
    bodies = []
    for b in batches:
        rows = []
        for i, p in enumerate(b["partitions"]):
            lead = (
                f'<td rowspan="{len(b["partitions"])}">#{b["batch_id"]}</td>'
                f'<td rowspan="{len(b["partitions"])}">{e(b["run_id"])}<br><small>{e(b["processing_time"])}</small></td>'
                if i == 0
                else ""
            )
            cells = "".join(
                f"<td>{e(str(p[k]))}</td>"
                for k in ("mq_partition", "offsets", "spanned", "read", "rows", "dirty", "tombstones", "late")
            )
            verdict = "holds" if p["holds"] else "DOES NOT HOLD"
            rows.append(f"<tr>{lead}{cells}<td>{p['without_message']}</td><td>{verdict}</td></tr>")
        if not rows:  # a replay of dirty records reads no offsets
            rows.append(
                f'<tr><td>#{b["batch_id"]}</td><td>{e(b["run_id"])}</td><td colspan="{len(COLUMNS) + 1}"></td></tr>'
            )
        state = "" if b["holds"] else " broken"
        bodies.append(
            f'<tbody id="{run_anchor(b["run_id"])}" class="batch{state}" data-batch="{b["batch_id"]}" '
            f'title="{e(b["reconciliation"])}">{"".join(rows)}'
            f'<tr class="sum"><td colspan="{len(COLUMNS) + 3}">{e(b["reconciliation"])}</td></tr></tbody>'
        )
    return (
        "<h2>Batches</h2><p>Each committed batch per MQ partition: read == rows + dirty + tombstones + late, "
        "and offsets spanned == read + without a message (transaction markers, aborted or compacted records).</p>"
        f'<table id="batches"><thead><tr>{head}</tr></thead>{"".join(bodies)}</table>'
    )
