"""The CDC envelope step (``tidemark/envelopes.py``), the same for every format: the format
decodes each message into its record, the envelope unwraps the record into the flat record of
one row change (or refuses it: ``invalid_envelope``), and the format types the flat records
into the table's columns. A message refused whole keeps its record index, as everywhere."""

from __future__ import annotations

from collections.abc import Sequence

from tidemark.envelopes import Envelope
from tidemark.ingest.decoders.base import Decoded, RecordDecoder, RecordGroup, Records


class EnvelopeDecoder:
    def __init__(self, inner: RecordDecoder, envelope: Envelope) -> None:
        self.inner = inner
        self.envelope = envelope

    def decode(self, values: Sequence[bytes], index: Sequence[int]) -> Decoded:
        decoded = self.inner.records(values, index)
        flat_groups = []
        for group in decoded.groups:
            flat = RecordGroup(group.key, [], [])
            for i, record in zip(group.rows, group.records, strict=True):
                row = self.envelope.unwrap(record)
                if isinstance(row, tuple):
                    decoded.rejected[i] = row
                else:
                    flat.rows.append(i)
                    flat.records.append(row)
            flat_groups.append(flat)
        return self.inner.typed(Records(flat_groups, decoded.rejected))
