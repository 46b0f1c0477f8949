"""The decoder interface and its result types: what every format module implements and
returns (``ingest/decoders/__init__.py`` picks the module for a table's ``source.format``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

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


@dataclass
class RecordGroup:
    """The decoded records of one writer schema (``key``: the format's own: a schema id, a
    (schema id, message type)), and the record index of each."""

    key: Any
    rows: list[int]
    records: list[Any]


@dataclass
class Records:
    """A block decoded into records, before typing (what a CDC envelope unwraps)."""

    groups: list[RecordGroup]
    rejected: dict[int, Verdict]


class RecordDecoder(Decoder, Protocol):
    """A decoder whose two halves a step can go between (``decoders/envelope.py``): the
    records of the messages as their writer wrote them, then their typing into the table's
    columns (each group's records: dicts of the column names' values)."""

    def records(self, values: Sequence[bytes], index: Sequence[int]) -> Records: ...

    def typed(self, records: Records) -> Decoded: ...
