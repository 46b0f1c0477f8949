"""Network helpers of the tests and benchmarks: free ports on 127.0.0.1, and a server that
accepts connections and never answers (a hung broker or registry)."""

from __future__ import annotations

import random
import socket
import threading


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_block(size: int) -> int:
    """The first of ``size`` consecutive free ports (a service that listens on several)."""

    for _ in range(200):
        base = random.randrange(20_000, 30_000)
        try:
            sockets = []
            for port in range(base, base + size):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    raise RuntimeError(f"no block of {size} free ports")


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (a hung service behind a live
    port: a registry or broker whose process is stuck). A context manager; ``url`` is HTTP."""

    def __init__(self, port: int = 0) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self._sock.listen(64)
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._held: list[socket.socket] = []
        self._closed = False

    def __enter__(self) -> SilentServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        self._sock.close()
        for conn in self._held:
            conn.close()
