#!/usr/bin/env bash
# The venv Spark executors of a cluster unpack and run (TIDEMARK_EXECUTOR_ENV): only what the
# read, stage and compaction tasks import (pyarrow, confluent-kafka, numpy, pydantic and pyyaml
# for the table config; the binary formats' decoders: fastavro, protobuf, polars' native
# reader without the polars package, and the Schema Registry client with its HTTP stack; no
# pandas: tidemark's tasks use Arrow batches only, and Spark's Arrow workers import pandas
# lazily), at requirements.txt's pinned versions,
# in a venv of the same Python as .venv, packed as a tar.gz (tidemark.executor_env ships it). Rebuilt when
# the pins change. The tidemark library itself travels apart (the zip every job ships), so a
# code change needs no new archive.
set -euo pipefail
venv=${1:-.venv}
share="$venv/share/tidemark"
out="$share/executor-env.tar.gz"
stamp="$share/executor-env.requirements"
mkdir -p "$share"
# bump when what goes into the archive changes (the stamp below then differs)
layout=3
wanted='^(pyarrow|confluent-kafka|numpy|tzdata|pyyaml|pydantic|pydantic-core|annotated-types|typing-extensions|typing-inspection|fastavro|protobuf|polars-runtime-32|httpx2|httpcore2|anyio|sniffio|h11|idna|certifi|truststore|authlib|joserfc|cryptography|cffi|pycparser|cachetools|attrs)=='
req=$(mktemp)
work=$(mktemp -d)
trap 'rm -rf "$work" "$req"' EXIT
{ echo "# archive layout $layout"; grep -iE "$wanted" requirements.txt; } > "$req"
if [[ -f "$out" && -f "$stamp" ]] && cmp -s "$req" "$stamp"; then
  exit 0
fi
echo "tidemark: building the executor venv archive ($(grep -vc "^#" "$req") packages, once per pin change)"
base=$("$venv/bin/python" -c 'import sys; print(sys._base_executable)')
"$base" -m venv --without-pip "$work/env"
"$venv/bin/uv" pip install --python "$work/env/bin/python" --quiet --compile-bytecode --no-deps -r "$req"
# Left out: what no task imports (Arrow Flight, headers, sources, test suites, numpy's build
# tools, confluent-kafka's legacy Avro module). Each worker node unpacks the archive once (the first
# executor there): 277 -> ~200 MB unpacked.
site="lib/python3*/site-packages"
tar -C "$work/env" -czf "$out.tmp" \
  --exclude="./$site/pyarrow/libarrow_flight.so*" \
  --exclude="./$site/pyarrow/libarrow_python_flight.so*" \
  --exclude="./$site/pyarrow/_flight.cpython-*.so" \
  --exclude="./$site/pyarrow/_pyarrow_cpp_tests.cpython-*.so" \
  --exclude="./$site/pyarrow/include" \
  --exclude="./$site/pyarrow/src" \
  --exclude="./$site/pyarrow/tests" \
  --exclude="./$site/pyarrow/*.pyx" \
  --exclude="./$site/pyarrow/*.pxd" \
  --exclude="./$site/pyarrow/*.pxi" \
  --exclude="./$site/numpy/f2py" \
  --exclude="./$site/numpy/distutils" \
  --exclude="./$site/numpy/*/tests" \
  --exclude="./$site/numpy/tests" \
  --exclude="./$site/confluent_kafka/avro" \
  .
mv "$out.tmp" "$out"
cp "$req" "$stamp"
echo "tidemark: executor venv in $out ($(du -h "$out" | cut -f1)); set TIDEMARK_EXECUTOR_ENV=$PWD/$out"
