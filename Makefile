# tidemark: every target is self-sufficient on a fresh clone. The venv is (re)built from
# requirements.txt whenever it is missing or older than requirements.txt / pyproject.toml.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.tidemark-installed
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help venv java jvm jvm-local docs-assets browser postgres executor-env spark-classes lint unit test demo up down status lock bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): requirements.txt pyproject.toml scripts/ensure_venv.sh
	@scripts/ensure_venv.sh
	@touch $@

venv: java $(STAMP)  ## build or refresh .venv from requirements.txt

java:  ## fail early, and clearly, without Java 17+
	@scripts/check_java.sh

docs-assets: venv  ## the CSS, JS and fonts of the Data Docs pages (pinned npm packages, 3.4 MB, once into the venv): pages that render offline
	@$(BIN)/python -m tidemark.seal.docs_assets

browser:  ## headless Chromium for the report's browser test (Debian package, installed if missing)
	@scripts/ensure_chromium.sh

postgres:  ## PostgreSQL server + JDBC driver for the JDBC bootstrap tests (Debian packages, installed if missing)
	@scripts/ensure_postgres.sh

jvm-local: venv  ## what `make demo` and `make up` run: the Apache Kafka broker and Iceberg for Spark (~100 MB, from Maven Central once, into ~/.cache/tidemark/jvm)
	@scripts/ensure_jvm.sh kafka iceberg

jvm: jvm-local  ## every pinned JVM artifact of jvm/pom.xml, for the tests and benches: jvm-local's, plus hadoop-aws + AWS SDK, delta-spark, Trino's server distribution, Iceberg's REST catalog and Nessie (~1.9 GB); tidemark's Delta log store for S3 and REST catalog launcher compiled (jvm/logstore, jvm/restcatalog)
	@scripts/ensure_jvm.sh s3a delta trino iceberg-rest nessie
	@scripts/build_logstore.sh $(BIN)/python
	@scripts/compile_jvm.sh iceberg-rest-server jvm/restcatalog "$${TIDEMARK_JVM_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/tidemark/jvm}/iceberg-rest/*"

executor-env: venv  ## the venv archive Spark executors of a cluster unpack (TIDEMARK_EXECUTOR_ENV)
	@scripts/build_executor_env.sh $(VENV)

spark-classes: venv  ## the class-data-sharing archives that halve a Spark driver's start, one per driver class path (after postgres and jvm: the JDBC and s3a jars are on it)
	@$(BIN)/python -m tidemark.jvm_classes

lint: venv  ## ruff + mypy + the import layers (lint-imports), and docker-compose.yaml against the Compose spec (offline)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/check-jsonschema --builtin-schema vendor.compose-spec docker-compose.yaml

unit: venv  ## the fast tier only
	$(BIN)/pytest -m unit -q

test: lint jvm docs-assets browser postgres executor-env spark-classes  ## lint, then the whole test suite (README's test command; what CI runs)
	$(BIN)/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25

demo: venv jvm-local docs-assets spark-classes  ## through Airflow (dag.test): events ingest + report, then the orders bootstrap, increments and merged snapshot
	$(BIN)/tidemark-dev demo

up: venv jvm-local docs-assets  ## start the broker (Apache Kafka, topics kept across restarts), the Hive metastore service on the home's Derby database (seals register over Thrift, no JVM) and Airflow standalone (UI on 127.0.0.1:8080)
	$(BIN)/tidemark-dev services start broker derby-metastore airflow

down: venv  ## stop everything `make up` started
	$(BIN)/tidemark-dev services stop all

status: venv  ## what is running
	$(BIN)/tidemark-dev services status all

lock:  ## re-resolve requirements.in into the pinned requirements.txt
	@test -x $(BIN)/uv || scripts/ensure_venv.sh
	$(BIN)/uv pip compile --python 3.11 --quiet requirements.in -o requirements.txt --custom-compile-command "make lock"

bench: venv jvm spark-classes  ## run the benchmarks in bench/ (prints figures; not part of the test suite; the JVM artifacts for bench/object_store.py and the Kafka broker)
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:  ## remove the venv and the local state (.tidemark/)
	rm -rf $(VENV) .tidemark .pytest_cache .mypy_cache .ruff_cache
