#!/usr/bin/env bash
# Create or refresh .venv from the pinned requirements.txt (uv for speed; ~30 s, 1.3 GB),
# then install the tidemark package itself (editable, no deps) so spark-submit jobs,
# Spark executors and the `tidemark` CLI import the same code Airflow loads from plugins/.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.8
python_bin="${PYTHON:-}"
if [[ -z "$python_bin" ]]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && \
       [[ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" == "3.11" ]]; then
      python_bin="$candidate"; break
    fi
  done
fi
if [[ -z "$python_bin" ]]; then
  echo "tidemark: Python 3.11 is required (apache-airflow 3.3 + pyspark 4.1); none found on PATH." >&2
  echo "  Debian/Ubuntu: apt-get install python3.11 python3.11-venv   (or set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if [[ ! -x .venv/bin/python ]] || \
   [[ "$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" != "3.11" ]]; then
  echo "tidemark: creating .venv with $python_bin"
  rm -rf .venv
  "$python_bin" -m venv .venv
fi
if [[ "$(.venv/bin/uv --version 2>/dev/null)" != "uv $UV_VERSION"* ]]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi
echo "tidemark: syncing .venv with requirements.txt"
# --compile-bytecode: precompiled .pyc files. Where PYTHONDONTWRITEBYTECODE is set (as on CI
# machines) nothing is ever cached, and every Spark worker, planner and Airflow task process
# compiled pandas and pyspark from source again: about 1 s per process.
.venv/bin/uv pip sync --python .venv/bin/python --quiet --compile-bytecode requirements.txt
.venv/bin/uv pip install --python .venv/bin/python --quiet --compile-bytecode --no-deps -e .
# The pyspark/pyspark-client trap: both write pyspark/; a version mismatch is a silent mix.
.venv/bin/python - <<'PY'
from importlib.metadata import version
a, b = version("pyspark"), version("pyspark-client")
if a != b:
    raise SystemExit(f"tidemark: pyspark {a} != pyspark-client {b}: pin both to the same version")
PY
