#!/usr/bin/env bash
# Compile tidemark's Delta log store for S3 (jvm/logstore: one class) against the delta-storage
# jar of the 'delta' profile and the pyspark wheel's Hadoop client, once per source digest, into
# <cache>/delta-logstore-<digest>/ (a .complete stamp written last); <cache>/delta-logstore points
# at the current one. Needs a JDK (javac, jar); run after `scripts/ensure_jvm.sh delta`.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-.venv/bin/python}"
cache="${TIDEMARK_JVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark/jvm}"
digest=$(cat jvm/logstore/io/tidemark/delta/*.java | sha256sum | cut -c1-12)
target="$cache/delta-logstore-$digest"
if [[ ! -f "$target/.complete" ]]; then
  storage=$(ls "$cache"/delta/delta-storage-*.jar)
  hadoop=$("$python" -c 'import pathlib, pyspark; print(next(pathlib.Path(pyspark.__file__).parent.glob("jars/hadoop-client-api-*.jar")))')
  rm -rf "$target.partial" && mkdir -p "$target.partial/classes"
  javac=$(command -v javac || ls /usr/lib/jvm/*/bin/javac 2>/dev/null | head -1)
  jar=$(dirname "$javac")/jar
  [[ -x "$javac" && -x "$jar" ]] || { echo "tidemark: a JDK (javac, jar) is needed to compile jvm/logstore" >&2; exit 1; }
  "$javac" --release 17 -nowarn -cp "$storage:$hadoop" -d "$target.partial/classes" jvm/logstore/io/tidemark/delta/*.java
  "$jar" cf "$target.partial/tidemark-delta-logstore.jar" -C "$target.partial/classes" .
  rm -rf "$target.partial/classes" "$target"
  mv "$target.partial" "$target"
  touch "$target/.complete"
  echo "tidemark: delta-logstore: compiled jvm/logstore into $target"
fi
ln -sfn "delta-logstore-$digest" "$cache/delta-logstore.tmp" && mv -T "$cache/delta-logstore.tmp" "$cache/delta-logstore"
