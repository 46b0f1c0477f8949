"""Values of data-derived partition columns admitted per hour, as the commit log keeps them
(the bound on them is ``ingest/cardinality.py``'s)."""

from __future__ import annotations

# hour key ("dt=2026-11-22/hr=10") -> column -> admitted values, sorted
PartitionValues = dict[str, dict[str, list[str]]]

__all__ = ["PartitionValues", "merge"]


def merge(known: PartitionValues, added: PartitionValues) -> PartitionValues:
    """``known`` plus ``added`` (a new mapping; neither argument is changed)."""
    merged = {hour: {c: list(v) for c, v in columns.items()} for hour, columns in known.items()}
    for hour, columns in added.items():
        for column, values in columns.items():
            target = merged.setdefault(hour, {}).setdefault(column, [])
            target[:] = sorted(set(target) | set(values))
    return merged
