"""The decoder interface and its result types: what every format module implements and
returns (``ingest/decoders/__init__.py`` picks the module for a table's ``source.format``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

Verdict = tuple[str, str | None]  # (reason, detail) of a rejected record


@dataclass
class Decoded:
    """A decoded block: ``columns`` holds every schema column in its table Arrow type, one row
    per accepted record (``accepted[i]``: the record index of row ``i``); ``mismatched`` marks
    rows whose value of a column could not be converted (dirty ``type_mismatch``); ``rejected``
    gives the records the format refused whole, by record index."""

    columns: dict[str, pa.Array]
    accepted: list[int]
    mismatched: dict[str, pa.Array] = field(default_factory=dict)
    rejected: dict[int, Verdict] = field(default_factory=dict)


class Decoder(Protocol):
    def decode(self, values: Sequence[bytes], index: Sequence[int]) -> Decoded:
        """Decode ``values`` (the messages of records ``index``, in order)."""
        ...
