"""Source formats: one decoder module per format, behind one interface.

A decoder turns a block of message values (each already checked by the classifier: not a
tombstone, not oversized) into the table's typed columns, one row per record it accepts, and a
reason for each record it rejects. Everything after that (null and event-time checks, partition
values, late rows, hour labels, lineage) is the classifier's and the same for every format, so
each format keeps the guarantees of the others: one message is one row or one dirty record,
rebuilds and replays classify as the first run did, the stream decodes as the batch does.

A CDC table's envelope is a step between a format's decoding and its typing
(``envelope.py``), so every format reads every envelope.

Where to add a format: a module here with a class that satisfies ``base.RecordDecoder``, its name in
``DECODERS``, the value in ``source.format`` (``config/source.py``), and its reason codes in
``config/columns.REASONS`` and docs/configuration.md (docs/how-tidemark-is-built.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tidemark.envelopes import Envelope
from tidemark.ingest.decoders.avro import AvroDecoder
from tidemark.ingest.decoders.base import Decoded, Decoder, RecordDecoder, Verdict
from tidemark.ingest.decoders.envelope import EnvelopeDecoder
from tidemark.ingest.decoders.json import JsonDecoder
from tidemark.ingest.decoders.protobuf import ProtobufDecoder
from tidemark.ingest.registry import writer_schemas

if TYPE_CHECKING:
    from tidemark.conversions import Conversion
    from tidemark.ingest.spec import ClassifySpec
    from tidemark.schema import Column


def decoder_for(spec: ClassifySpec, columns: list[Column], conversions: dict[str, Conversion]) -> Decoder:
    """The decoder of a spec's ``source_format``, applying its declared ``conversions``."""
    try:
        make = DECODERS[spec.source_format]
    except KeyError:
        raise ValueError(
            f"no decoder for source format {spec.source_format!r} (known: {sorted(DECODERS)})"
        ) from None
    envelope = spec.cdc_envelope
    decoder = make(spec, columns, conversions, envelope)
    if envelope is not None:  # CDC records in an envelope: a step between decoding and typing
        return EnvelopeDecoder(decoder, envelope)
    return decoder


def _json(
    spec: ClassifySpec, columns: list[Column], conversions: dict[str, Conversion], envelope: Envelope | None
) -> RecordDecoder:
    return JsonDecoder(columns, spec.event_time_field, conversions)


def _avro(
    spec: ClassifySpec, columns: list[Column], conversions: dict[str, Conversion], envelope: Envelope | None
) -> RecordDecoder:
    registry = dict(spec.schema_registry)
    schemas = writer_schemas(spec.table or spec.topic, registry, spec.writer_schema)
    return AvroDecoder(columns, conversions, schemas, framed=bool(registry), envelope=envelope)


def _protobuf(
    spec: ClassifySpec, columns: list[Column], conversions: dict[str, Conversion], envelope: Envelope | None
) -> RecordDecoder:
    schemas = writer_schemas(spec.table or spec.topic, dict(spec.schema_registry), "", serialized=True)
    return ProtobufDecoder(columns, conversions, schemas, envelope)


# Each format's decoder, given the table's CDC envelope (its writer schemas are the envelope's).
DECODERS: dict[
    str,
    Callable[[ClassifySpec, list[Column], dict[str, Conversion], Envelope | None], RecordDecoder],
] = {
    "json": _json,
    "avro": _avro,
    "protobuf": _protobuf,
}

__all__ = ["DECODERS", "Decoded", "Decoder", "Verdict", "decoder_for"]
