"""Network helpers of the tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_block(size: int) -> int:
    """The first of ``size`` consecutive free ports (a service that listens on several)."""
    import random

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
