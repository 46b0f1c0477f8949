"""The venv archive a cluster's executors run (``make executor-env``) holds what a read task of
every source format imports: unpacked and run alone, its Python reads Avro messages framed for
the Schema Registry (fetching the writer schema from the registry, decoding the block in one
vectorised call through polars' native reader) and Protobuf ones. Before, the archive had
neither fastavro nor the registry client: an Avro table on a cluster failed its read tasks."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from tests.helpers.avro import avro_events
from tests.helpers.tables import ROOT

pytestmark = pytest.mark.integration

ARCHIVE = Path(sys.executable).parent.parent / "share" / "tidemark" / "executor-env.tar.gz"


def test_the_executor_archive_reads_avro_from_the_registry_and_protobuf(
    schema_registry: str, tmp_path: Path
) -> None:
    assert ARCHIVE.is_file(), "run `make executor-env` (make test does)"
    venv = tmp_path / "env"
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(venv, filter="fully_trusted")  # our own archive (symlinks to the base Python)
    values = avro_events(schema_registry, [{"event_id": f"e{i}"} for i in range(50)], topic="t")
    (tmp_path / "values.json").write_text(json.dumps([v.hex() for v in values]))
    script = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        from tidemark.ingest.decoders import avro_block
        from tidemark.ingest.decoders.avro import AvroDecoder
        from tidemark.ingest.decoders.protobuf import ProtobufDecoder  # the protobuf runtime
        from tidemark.ingest.registry import SchemaRegistry
        from tidemark.schema import parse_column

        values = [bytes.fromhex(v) for v in json.loads(Path({str(tmp_path / "values.json")!r}).read_text())]
        columns = [parse_column("event_id", "string not null"), parse_column("amount", "decimal(12,2)")]
        registry = SchemaRegistry("t", {{"url": {schema_registry!r}}})
        decoded = AvroDecoder(columns, {{}}, registry, framed=True).decode(values, list(range(len(values))))
        writer = registry.schema(int.from_bytes(values[0][1:5], "big")).text
        block = avro_block.decode_records(writer, [v[5:] for v in values])
        print(json.dumps([decoded.columns["event_id"].to_pylist(), block is not None, "polars" in sys.modules]))
        """
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script],
        env={"PYTHONPATH": str(ROOT / "plugins"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ids, vectorised, polars_package = json.loads(done.stdout.strip().splitlines()[-1])
    assert ids == [f"e{i}" for i in range(50)]
    assert vectorised is True  # the block is read in one call there too
    assert polars_package is False  # the native reader alone: the package is not in the archive
