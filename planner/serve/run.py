"""Running the application under uvicorn: the listening socket and uvicorn's settings, shared by
``plan-serve`` and :class:`plan_search.cli.serve.ServerThread` (the tests' and the benchmark's server)."""

from __future__ import annotations

import ipaddress
import socket

#: uvicorn's bound on open connections and tasks: one more is answered 503 by uvicorn itself
MAX_CONNECTIONS = 64
#: seconds an idle keep-alive connection is kept
KEEP_ALIVE_S = 5


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: an ephemeral one; read it from getsockname)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def config(app, log_level: str = "warning"):
    import uvicorn

    return uvicorn.Config(app, log_level=log_level, access_log=False, limit_concurrency=MAX_CONNECTIONS,
                          timeout_keep_alive=KEEP_ALIVE_S, lifespan="on", server_header=False)
