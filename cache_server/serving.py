"""``xla-cache-server serve`` under uvicorn: one worker in this process, or several sharing one socket.

Once the server listens it logs one line, ``dashboard: http://<host>:<port>/``, where a person opens the
dashboard (uvicorn's own "running on" line names no page). With several workers this process binds the
socket and logs it once, before the workers start; with one, the server logs it after its bind.
"""

from __future__ import annotations

import logging
import socket

import uvicorn
from uvicorn.supervisors import Multiprocess

__all__ = ["dashboard_line", "serve"]

log = logging.getLogger("cache_server.cli")
EVERY_INTERFACE = frozenset({"0.0.0.0", "::", ""})


def dashboard_line(host: str, port: int) -> str:
    """Where the dashboard is: the host and port as served (every interface said in words)."""
    shown = f"[{host}]" if ":" in host else host
    line = f"dashboard: http://{shown}:{port}/"
    if host in EVERY_INTERFACE:
        line += " (listening on every interface: open it at this machine's name or address)"
    return line


class _Server(uvicorn.Server):
    """uvicorn's server, which also says where the dashboard is once its socket listens."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.should_exit or not self.servers:
            return  # it could not bind: uvicorn said why
        port = self.servers[0].sockets[0].getsockname()[1]
        log.info("%s", dashboard_line(self.config.host, port))


def serve(config: uvicorn.Config) -> bool:
    """Run the server until it is told to stop; False if it could not start (uvicorn logged why)."""
    if config.workers > 1:
        sock = config.bind_socket()  # the workers share the socket this process listens on
        log.info("%s", dashboard_line(config.host, sock.getsockname()[1]))
        Multiprocess(config, sockets=[sock]).run()
        return True
    server = _Server(config)
    server.run()
    return server.started
