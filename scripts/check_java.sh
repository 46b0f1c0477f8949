#!/usr/bin/env bash
# Spark 4.1 needs Java 17 or 21. Fail with a message naming what to install.
set -euo pipefail
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "tidemark: Java 17 is required (Spark 4.1) but no 'java' was found." >&2
  echo "  Debian/Ubuntu: apt-get install openjdk-17-jdk-headless   (or set JAVA_HOME)" >&2
  exit 1
fi
version_line=$("$java_bin" -version 2>&1 | head -n 1)
major=$(sed -E 's/.*version "([0-9]+).*/\1/' <<<"$version_line")
if ! [[ "$major" =~ ^[0-9]+$ ]] || (( major < 17 )); then
  echo "tidemark: Java 17 is required (Spark 4.1); found: $version_line" >&2
  echo "  Debian/Ubuntu: apt-get install openjdk-17-jdk-headless   (or set JAVA_HOME)" >&2
  exit 1
fi
