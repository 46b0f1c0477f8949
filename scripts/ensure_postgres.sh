#!/usr/bin/env bash
# PostgreSQL server and its JDBC driver (Debian's postgresql + libpostgresql-jdbc-java), for the
# JDBC bootstrap tests and the demo's orders source; installed when missing. tidemark starts
# its own cluster on its own port (`tidemark-dev services start postgres`), never the system one.
set -euo pipefail
have_server() { compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; }
have_driver() { [[ -f /usr/share/java/postgresql.jar ]]; }
if have_server && have_driver; then
  exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "tidemark: installing Debian's postgresql and libpostgresql-jdbc-java for the JDBC bootstrap (once)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends postgresql libpostgresql-jdbc-java >/dev/null
  # Debian's package starts a system cluster on 5432; tidemark does not use it.
  if have_server && have_driver; then
    exit 0
  fi
fi
echo "tidemark: PostgreSQL or its JDBC driver is missing: install them with" \
  "'sudo apt-get install postgresql libpostgresql-jdbc-java'" >&2
exit 1
