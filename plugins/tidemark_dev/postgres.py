"""A PostgreSQL cluster of tidemark's own for the demo and the tests (the JDBC source of the
orders bootstrap), managed like the other local services."""

from __future__ import annotations

import glob
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

from tidemark.errors import ServiceError
from tidemark.settings import Settings
from tidemark_dev.services import Service

log = logging.getLogger(__name__)


POSTGRES_USER = "tidemark"
# A throwaway local cluster with a published password, never a real database's credentials.
POSTGRES_PASSWORD = "tidemark"


def postgres_url(settings: Settings, database: str = "postgres") -> str:
    """JDBC URL of the local cluster (credentials travel separately)."""
    return f"jdbc:postgresql://127.0.0.1:{settings.postgres_port}/{database}"


class PostgresService(Service):
    """A PostgreSQL cluster of tidemark's own on ``TIDEMARK_POSTGRES_PORT`` (Debian's server
    binaries, scripts/ensure_postgres.sh). PostgreSQL refuses to run as root, so under root the
    cluster runs as the ``postgres`` user in a directory that user can reach."""

    name = "postgres"
    stop_signal = signal.SIGINT  # "fast" shutdown
    start_timeout = 60.0

    def address(self) -> str:
        return f"127.0.0.1:{self.settings.postgres_port}"

    @property
    def as_root(self) -> bool:
        return os.geteuid() == 0

    @property
    def data_dir(self) -> Path:
        if self.as_root:  # TIDEMARK_HOME may sit under a 0700 directory of root's
            return Path(tempfile.gettempdir()) / f"tidemark-postgres-{self.settings.postgres_port}"
        return self.settings.home / "postgres"

    def _bin(self, program: str) -> str:
        found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{program}"))
        if not found:
            raise ServiceError(
                "postgres: no PostgreSQL server binaries under /usr/lib/postgresql; "
                "run scripts/ensure_postgres.sh (or apt-get install postgresql)"
            )
        return found[-1]

    def _as_owner(self, command: list[str]) -> list[str]:
        # setpriv execs in place (runuser would stay the parent and swallow SIGINT).
        owner = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
        return [*owner, *command] if self.as_root else command

    def command(self) -> list[str]:
        return self._as_owner(
            [
                self._bin("postgres"),
                "-D",
                str(self.data_dir),
                "-p",
                str(self.settings.postgres_port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={self.data_dir}",
                "-c",
                "fsync=off",
            ]
        )

    def answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.settings.postgres_port), timeout=2).close()
        except OSError:
            return False
        probe = subprocess.run(
            [self._bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.settings.postgres_port)],
            capture_output=True,
            check=False,
        )
        return probe.returncode == 0

    def prepare(self) -> None:
        """initdb once: user ``tidemark`` with a password over TCP (scram), trust on the socket."""
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        pwfile = self.data_dir.parent / f".{self.data_dir.name}.pw"
        pwfile.write_text(POSTGRES_PASSWORD + "\n")
        if self.as_root:
            shutil.chown(self.data_dir, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
        initdb = [
            self._bin("initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            POSTGRES_USER,
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "--encoding=UTF8",
        ]
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            result = subprocess.run(self._as_owner(initdb), stdout=out, stderr=subprocess.STDOUT, check=False)
        pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise ServiceError(f"postgres: initdb of {self.data_dir} failed; see {self.log_file}")
        log.info("postgres: new cluster in %s (user %s)", self.data_dir, POSTGRES_USER)
