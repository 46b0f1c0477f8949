#!/usr/bin/env bash
# Compile tidemark's Delta log store for S3 (jvm/logstore: one class) against the delta-storage
# jar of the 'delta' profile and the pyspark wheel's Hadoop client (scripts/compile_jvm.sh:
# <cache>/delta-logstore). Run after `scripts/ensure_jvm.sh delta`.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"
cache="${TIDEMARK_JVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark/jvm}"
storage=$(ls "$cache"/delta/delta-storage-*.jar)
hadoop=$("$python" -c 'import pathlib, pyspark; print(next(pathlib.Path(pyspark.__file__).parent.glob("jars/hadoop-client-api-*.jar")))')
exec scripts/compile_jvm.sh delta-logstore jvm/logstore "$storage:$hadoop"
