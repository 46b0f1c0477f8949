"""A CDC envelope around a format's records (``ingest/envelopes.py``): each message is
unwrapped into its flat record first, then decoded by the format's decoder; a message that is
not its envelope's shape is refused whole, the others keep their record indices."""

from __future__ import annotations

from collections.abc import Sequence

from tidemark.ingest.decoders.base import Decoded, Decoder, Verdict
from tidemark.ingest.envelopes import flat_message


class EnvelopeDecoder:
    def __init__(self, inner: Decoder, envelope: str, op_field: str, version_field: str) -> None:
        self.inner = inner
        self.envelope = envelope
        self.op_field = op_field
        self.version_field = version_field

    def decode(self, values: Sequence[bytes], index: Sequence[int]) -> Decoded:
        rejected: dict[int, Verdict] = {}
        flat: list[bytes] = []
        kept: list[int] = []
        for i, value in zip(index, values, strict=True):
            record = flat_message(self.envelope, value, self.op_field, self.version_field)
            if isinstance(record, tuple):
                rejected[i] = record
            else:
                flat.append(record)
                kept.append(i)
        decoded = self.inner.decode(flat, kept)
        decoded.rejected.update(rejected)
        return decoded
