"""Per-MQ-partition watermarks and the global ready time (pure functions, no I/O).

watermark(p) = max event time seen on p - ``max_out_of_orderness``, never moving backwards.
The global ready time is the minimum over *active* partitions. A partition that has delivered
no valid record (one with an event time) for ``idle_timeout`` of processing time (the plans'
processing times, never the wall clock) is idle and stops holding the minimum back, even if
its end offset moves with dirty records, tombstones or transaction markers; it counts again
with its next valid record (``last_moved_at`` is when that last happened). When every
partition is idle, everything that was sent has been read, so the
ready time is the highest watermark. The ready time itself never moves backwards either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tidemark.compat import renamed
from tidemark.time.instants import iso, parse_instant


@dataclass(frozen=True)
class MqWatermark:
    mq_partition: int
    end_offset: int
    last_moved_at: str
    watermark: str | None = None
    max_event_time: str | None = None

    def idle_for(self, processing_time: datetime) -> timedelta:
        moved = parse_instant(self.last_moved_at)
        assert moved is not None
        return processing_time - moved

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MqWatermark:
        return cls(**renamed(data, partition="mq_partition"))


@dataclass(frozen=True)
class BatchObservation:
    """What one batch saw on one MQ partition (from the plan and reconciled stats)."""

    mq_partition: int
    end_offset: int
    max_event_time: str | None


def advance(
    previous: Mapping[int, MqWatermark],
    observed: Iterable[BatchObservation],
    *,
    processing_time: datetime,
    max_out_of_orderness: timedelta,
) -> dict[int, MqWatermark]:
    """The watermarks after a batch: monotonic, with ``last_moved_at`` updated where the end
    offset advanced."""
    result = dict(previous)
    now = processing_time.isoformat()
    for obs in observed:
        prev = previous.get(obs.mq_partition)
        candidate = parse_instant(obs.max_event_time)
        wm = candidate - max_out_of_orderness if candidate else None
        if prev is None:
            result[obs.mq_partition] = MqWatermark(
                obs.mq_partition, obs.end_offset, now, iso(wm), obs.max_event_time
            )
            continue
        best_wm = max(filter(None, (parse_instant(prev.watermark), wm)), default=None)
        best_max = max(filter(None, (parse_instant(prev.max_event_time), candidate)), default=None)
        # Active means valid records arriving: a partition that only gets dirty records,
        # tombstones or transaction markers moves its end offset but must still turn idle.
        moved = obs.max_event_time is not None
        result[obs.mq_partition] = replace(
            prev,
            end_offset=obs.end_offset,
            last_moved_at=now if moved else prev.last_moved_at,
            watermark=iso(best_wm),
            max_event_time=iso(best_max),
        )
    return result


@dataclass(frozen=True)
class ReadyTime:
    """The global ready time and why it is where it is."""

    time: str | None
    processing_time: str
    holding: int | None = None  # the MQ partition whose watermark is the minimum
    idle: tuple[int, ...] = ()
    waiting_for_data: tuple[int, ...] = ()  # active partitions that never had a valid event
    all_idle: bool = False
    mq_partitions: tuple[MqWatermark, ...] = field(default_factory=tuple)

    @property
    def instant(self) -> datetime | None:
        return parse_instant(self.time)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReadyTime:
        data = renamed(data, partitions="mq_partitions")
        data["idle"] = tuple(data.get("idle", ()))
        data["waiting_for_data"] = tuple(data.get("waiting_for_data", ()))
        data["mq_partitions"] = tuple(MqWatermark.from_json(p) for p in data.get("mq_partitions", ()))
        return cls(**data)


def ready_time(
    watermarks: Mapping[int, MqWatermark],
    *,
    processing_time: datetime,
    idle_timeout: timedelta,
    previous: datetime | None = None,
    retired_margin: timedelta | None = None,
) -> ReadyTime:
    """Global minimum over active partitions (idle ones excluded); never below ``previous``.

    ``retired_margin``: the source is retired (its topic is gone, no record will ever come).
    Once every partition is idle, the ready time is the highest watermark plus this margin,
    which the caller sizes so that the hour of the last record seals, and no later one."""
    parts = tuple(sorted(watermarks.values(), key=lambda w: w.mq_partition))
    idle = tuple(w.mq_partition for w in parts if w.idle_for(processing_time) >= idle_timeout)
    active = [w for w in parts if w.mq_partition not in idle]
    waiting = tuple(w.mq_partition for w in active if w.watermark is None)
    holding: int | None = None
    computed: datetime | None
    if not parts:
        computed = None
    elif not active:
        with_data = [w for w in parts if w.watermark]
        top = max(
            with_data,
            key=lambda w: parse_instant(w.watermark) or datetime.min.replace(tzinfo=UTC),
            default=None,
        )
        computed = parse_instant(top.watermark) if top else None
        if computed is not None and retired_margin is not None:
            computed += retired_margin
    elif waiting:
        computed, holding = None, waiting[0]
    else:
        low = min(active, key=lambda w: parse_instant(w.watermark) or datetime.max.replace(tzinfo=UTC))
        computed, holding = parse_instant(low.watermark), low.mq_partition
    best = max(filter(None, (computed, previous)), default=None)
    return ReadyTime(
        time=iso(best),
        processing_time=processing_time.isoformat(),
        holding=holding,
        idle=idle,
        waiting_for_data=waiting,
        all_idle=bool(parts) and not active,
        mq_partitions=parts,
    )
