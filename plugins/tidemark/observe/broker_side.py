"""The broker's side of a table, for status, metrics and the health page: what the commit log
cannot know.

- **Open transactions.** A read_committed plan ends at the last stable offset, so a
  transaction left open holds every record after it back while the lag reads 0: the offsets
  between the last stable offset and the high watermark wait, since the open transaction's
  first record was written.
- **Offsets at risk.** Retention deletes from the log start: when the broker's earliest offset
  closes in on the table's next offset (less than ``AT_RISK_FRACTION`` of the retained span
  left in between) while records still wait, the next deletion reaches records the table has
  not read.
- **Offsets lost.** The earliest offset is past the table's next offset: the next plan stops
  with ``OffsetsLostToRetentionError`` (or records the gap, ``on_data_loss:
  record_and_continue``). Losses already recorded are the commit log's ``lost_to_retention``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tidemark.config import TableConfig
from tidemark.errors import BrokerUnavailableError
from tidemark.ingest.kafka import client_properties, open_transactions, partition_offsets
from tidemark.settings import Settings

AT_RISK_FRACTION = 0.1


def broker_side(config: TableConfig, settings: Settings, end_offsets: dict[int, int]) -> dict[str, Any]:
    """Per MQ partition: earliest and stable offsets, lag, open transaction, retention risk;
    and a summary. A retired table asks no broker; an unreachable one is reported, not raised."""
    side: dict[str, Any] = {"partitions": {}, "error": None}
    if not config.source.retired:
        try:
            conf = client_properties(settings.kafka_bootstrap, config.source.kafka_properties)
            offsets = partition_offsets(conf, config.source.topic)
            waiting = open_transactions(
                conf, config.source.topic, {p: stable for p, (_, stable) in offsets.items()}
            )
        except BrokerUnavailableError as exc:
            side["error"] = str(exc)
            offsets, waiting = {}, {}
        for p, (earliest, stable) in sorted(offsets.items()):
            side["partitions"][p] = _partition(end_offsets.get(p), earliest, stable, waiting.get(p))
    parts = side["partitions"].values()
    since = [info["open_transaction_since"] for info in parts if info["open_transaction_since"]]
    side["summary"] = {
        "offsets_in_open_transactions": sum(info["open_transaction_offsets"] for info in parts),
        "open_transaction_since": min(since, default=None),
        "mq_partitions_at_risk": sorted(p for p, info in side["partitions"].items() if info["at_risk"]),
        "offsets_lost_on_broker": sum(info["lost"] for info in parts),
    }
    return side


def _partition(
    end: int | None, earliest: int, stable: int, waiting: tuple[int, int | None] | None
) -> dict[str, Any]:
    nxt = earliest if end is None else end  # a table that never read it starts at its earliest
    lag = max(0, stable - nxt)
    headroom = nxt - earliest
    count, first_ms = waiting or (0, None)
    return {
        "committed_end": end,
        "earliest": earliest,
        "latest": stable,
        "lag": lag,
        "open_transaction_offsets": count,
        "open_transaction_since": (
            datetime.fromtimestamp(first_ms / 1000, UTC).isoformat(timespec="seconds") if first_ms else None
        ),
        "retention_headroom": max(0, headroom),
        "lost": max(0, -headroom),
        "at_risk": headroom < 0
        or (end is not None and lag > 0 and headroom <= AT_RISK_FRACTION * (stable - earliest)),
    }


def describe(side: dict[str, Any], table: str) -> list[str]:
    """The lines status prints (nothing when the broker's side is quiet)."""
    summary, lines = side["summary"], []
    if summary["offsets_in_open_transactions"]:
        held = [p for p, info in side["partitions"].items() if info.get("open_transaction_offsets")]
        lines.append(
            f"  open transaction: {summary['offsets_in_open_transactions']} offsets on MQ partitions {held} wait "
            f"behind a transaction open since {summary['open_transaction_since'] or 'an unknown time'} (plans "
            "stop at the last stable offset: a lag of 0 does not mean caught up)"
        )
    for p, info in side["partitions"].items():
        if info.get("lost"):
            lines.append(
                f"  LOST to retention on MQ partition {p}: offsets {info['committed_end']}..{info['earliest'] - 1} "
                f"were deleted before the table read them; tidemark resolve --table {table} --action accept-loss "
                '--reason "..."'
            )
        elif info.get("at_risk"):
            lines.append(
                f"  AT RISK on MQ partition {p}: the broker's earliest offset {info['earliest']} is "
                f"{info['retention_headroom']} offsets behind the table's next one, with {info['lag']} waiting: "
                "the next retention deletion may reach unread records"
            )
    return lines
