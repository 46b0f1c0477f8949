"""Filling a PostgreSQL source table for the demo and the JDBC tests, through ``psql``.

The bootstrap itself reads PostgreSQL with Spark's JDBC reader; this is only the other side
(the OLTP database the orders come from), so it uses the client that ships with the server
rather than adding a Python driver to the stack. Rows travel as CSV through ``COPY ... FROM
STDIN``; the password through ``PGPASSWORD``, never on a command line.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tidemark.errors import ServiceError
from tidemark.settings import Settings
from tidemark_dev.postgres import POSTGRES_PASSWORD, POSTGRES_USER

ORDERS_DDL = (
    "order_id bigint PRIMARY KEY, version bigint NOT NULL, customer_id bigint, status text, "
    "amount numeric(12,2), updated_at timestamptz NOT NULL"
)
ORDERS_COLUMNS = ("order_id", "version", "customer_id", "status", "amount", "updated_at")


def psql(settings: Settings, sql: str, *, stdin: str | None = None, database: str = "postgres") -> str:
    """Run ``sql`` (stopping at the first error) against tidemark's local cluster."""
    binary = shutil.which("psql")
    if binary is None:
        raise ServiceError("psql not found: run scripts/ensure_postgres.sh")
    command = [
        binary,
        "-h",
        "127.0.0.1",
        "-p",
        str(settings.postgres_port),
        "-U",
        POSTGRES_USER,
        "-d",
        database,
        "-v",
        "ON_ERROR_STOP=1",
        "-q",
        "-A",
        "-t",
        "-c",
        sql,
    ]
    env = {**os.environ, "PGPASSWORD": POSTGRES_PASSWORD, "PGCONNECT_TIMEOUT": "10"}
    result = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise ServiceError(f"psql on 127.0.0.1:{settings.postgres_port}: {result.stderr.strip()}")
    return result.stdout


def replace_table(
    settings: Settings, table: str, ddl: str, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]
) -> int:
    """(Re)create ``table`` and load ``rows``; returns the row count."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    count = 0
    for row in rows:
        writer.writerow(["" if row.get(c) is None else row[c] for c in columns])
        count += 1
    psql(settings, f'DROP TABLE IF EXISTS "{table}"; CREATE TABLE "{table}" ({ddl})')
    psql(
        settings,
        f'COPY "{table}" ({", ".join(columns)}) FROM STDIN WITH (FORMAT csv)',
        stdin=buffer.getvalue(),
    )
    return count


def apply_order_changes(settings: Settings, table: str, changes: Iterable[Mapping[str, Any]]) -> None:
    """Apply CDC changes to the source table as the OLTP application would (upsert / delete)."""
    statements = []
    for change in changes:
        if change["op"] == "d":
            statements.append(f'DELETE FROM "{table}" WHERE order_id = {int(change["order_id"])};')
            continue
        values = ", ".join(_literal(change[c]) for c in ORDERS_COLUMNS)
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in ORDERS_COLUMNS[1:])
        statements.append(
            f'INSERT INTO "{table}" ({", ".join(ORDERS_COLUMNS)}) VALUES ({values}) '
            f"ON CONFLICT (order_id) DO UPDATE SET {updates};"
        )
    if statements:
        psql(settings, "BEGIN; " + " ".join(statements) + " COMMIT;")


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int | float):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"
