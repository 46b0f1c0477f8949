#!/usr/bin/env bash
# Headless Chromium for the report's browser test: Debian's package, installed when missing.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "tidemark: installing Debian's chromium for the report's browser test (once)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
  command -v chromium >/dev/null && exit 0
fi
echo "tidemark: chromium is missing: install it with 'sudo apt-get install chromium'" >&2
exit 1
