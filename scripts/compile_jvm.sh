#!/usr/bin/env bash
# Compile one of tidemark's own JVM sources (jvm/<dir>: a few classes) against a class path into
# a jar, once per source digest: <cache>/<name>-<digest>/ (a .complete stamp written last);
# <cache>/<name> points at the current one. Needs a JDK (javac, jar).
# Usage: scripts/compile_jvm.sh NAME SOURCE_DIR CLASS_PATH
set -euo pipefail
cd "$(dirname "$0")/.."
name="$1" sources="$2" class_path="$3"
cache="${TIDEMARK_JVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidemark/jvm}"
digest=$(find "$sources" -name '*.java' -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-12)
target="$cache/$name-$digest"
if [[ ! -f "$target/.complete" ]]; then
  rm -rf "$target.partial" && mkdir -p "$target.partial/classes"
  javac=$(command -v javac || ls /usr/lib/jvm/*/bin/javac 2>/dev/null | head -1)
  jar=$(dirname "$javac")/jar
  [[ -x "$javac" && -x "$jar" ]] || { echo "tidemark: a JDK (javac, jar) is needed to compile $sources" >&2; exit 1; }
  find "$sources" -name '*.java' -print0 | xargs -0 "$javac" --release 17 -nowarn -cp "$class_path" -d "$target.partial/classes"
  "$jar" cf "$target.partial/tidemark-$name.jar" -C "$target.partial/classes" .
  rm -rf "$target.partial/classes" "$target"
  mv "$target.partial" "$target"
  touch "$target/.complete"
  echo "tidemark: $name: compiled $sources into $target"
fi
ln -sfn "$name-$digest" "$cache/$name.tmp" && mv -T "$cache/$name.tmp" "$cache/$name"
