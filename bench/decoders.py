"""Decoding cost per source format, in one process, in one sitting: the classifier's decode
of the same events as JSON and as Avro (Confluent wire format), against a plain baseline
that uses the same decoder library (fastavro + pyarrow, no checks).

    .venv/bin/python bench/decoders.py [--events 200000]

No broker, no Spark: this isolates what the format costs inside a read task. Prints records/s
of each and ``avro/json = X.XX`` last. Not a test: the figures are for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import io
import platform
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import _root  # noqa: F401 - the repository root on sys.path, for tests.helpers

from tests.helpers.classify import block, events_config, spec_of
from tidemark.ingest.classify import Classifier
from tidemark.ingest.decoders import avro
from tidemark_dev.demo_avro import EVENT_SCHEMA, avro_messages
from tidemark_dev.generator import events
from tidemark_dev.schema_registry import SchemaRegistryStandIn

BLOCK = 20_000  # records per classify call, as the read tasks hand them out


def timed(label: str, count: int, work: Any, repeat: int = 3) -> float:
    best = min(_once(work) for _ in range(repeat))
    print(f"{label:<28} {count / best:>12,.0f} rec/s  ({best:.2f} s, best of {repeat})", flush=True)
    return count / best


def _once(work: Any) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    args = parser.parse_args(argv)

    import pyarrow as pa
    from fastavro import parse_schema, schemaless_reader

    start = datetime(2026, 11, 22, 10, tzinfo=UTC)
    clicks = list(events(args.events, start=start, span=timedelta(minutes=50), partitions=1))
    registry = SchemaRegistryStandIn().start()
    try:
        framed = [m.value or b"" for m in avro_messages(registry.url, "bench", clicks)]
        json_values = [m.value or b"" for m in clicks]
        n = len(json_values)
        json_spec = spec_of(events_config())
        avro_spec = spec_of(
            events_config(source__format="avro", source__schema_registry={"url": registry.url})
        )

        def classify(spec: Any, values: list[bytes]) -> None:
            classifier = Classifier(spec)
            for i in range(0, len(values), BLOCK):
                classifier.classify(block(values[i : i + BLOCK]))

        parsed = parse_schema(EVENT_SCHEMA)
        columns = [f["name"] for f in EVENT_SCHEMA["fields"]]

        def baseline() -> None:
            for i in range(0, n, BLOCK):
                records = [schemaless_reader(io.BytesIO(v[5:]), parsed, None) for v in framed[i : i + BLOCK]]
                pa.Table.from_pydict({c: [r[c] for r in records] for c in columns})  # type: ignore[index]

        def record_by_record() -> None:
            avro.VECTORISED = False
            try:
                classify(avro_spec, framed)
            finally:
                avro.VECTORISED = True

        rates = {
            "json": timed("classify JSON (pyarrow.json)", n, lambda: classify(json_spec, json_values)),
            "avro": timed("classify Avro (vectorised)", n, lambda: classify(avro_spec, framed)),
            "per_record": timed("classify Avro (record by rec.)", n, record_by_record),
            "baseline": timed("baseline fastavro + pyarrow", n, baseline),
        }
    finally:
        registry.stop()
    avg = sum(map(len, framed)) / len(framed), sum(map(len, json_values)) / len(json_values)
    print(f"message sizes: Avro {avg[0]:.0f} B, JSON {avg[1]:.0f} B")
    print(f"machine: {platform.node()}, Python {platform.python_version()}, {datetime.now(UTC):%Y-%m-%d}")
    print(f"avro/baseline = {rates['avro'] / rates['baseline']:.2f}")
    print(f"vectorised/record-by-record = {rates['avro'] / rates['per_record']:.2f}")
    print(f"avro/json = {rates['avro'] / rates['json']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
