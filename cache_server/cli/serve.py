"""uvicorn's HTTP protocol with a header read timeout, so that idle or trickling connections cannot pile up.

uvicorn bounds only the idle time between requests of a keep-alive connection (``timeout_keep_alive``,
stopped by the first byte that arrives): a connection that never sends a request, or sends its headers a
byte now and then (slowloris), is kept open for ever. Here a connection must complete a request's headers
within ``XLA_CACHE_HEADER_TIMEOUT_SECONDS`` of opening, and, on a kept-alive connection, of the first byte
of each further request; otherwise it is closed, without an answer. The idle time between requests stays
uvicorn's keep-alive timeout (``XLA_CACHE_KEEP_ALIVE_SECONDS``), so a load balancer's pooled connections
last as long as that says. A request whose headers arrived is not timed here: its body has the app's own
bounds (``XLA_CACHE_BODY_TIMEOUT_SECONDS``), and a long poll may wait as long as it asked.

``xla-cache-server serve`` hands uvicorn :func:`protocol_factory` (a picklable partial, so that every worker
process gets the same timeout), and runs it with :func:`serve`: once the server listens, that logs one line,
``dashboard: http://<host>:<port>/``, where a person opens the dashboard (uvicorn's "running on" line names
no page). With several workers the process that binds their shared socket logs it, once, before they start.
uvicorn logs with :func:`log_config`: its own configuration, less the traceback of a response broken off
on purpose (:class:`BrokenOffFilter`).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import socket
from typing import Any, cast

from uvicorn.config import LOGGING_CONFIG, Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import Server, ServerState
from uvicorn.supervisors import Multiprocess

from cache_server.errors import ResponseBrokenOff

__all__ = [
    "BrokenOffFilter",
    "HeaderTimeoutProtocol",
    "dashboard_line",
    "log_config",
    "protocol_factory",
    "serve",
]

log = logging.getLogger("cache_server.cli")
EVERY_INTERFACE = frozenset({"0.0.0.0", "::", ""})


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (what it runs by default; httptools comes with ``uvicorn[standard]``),
    closing a connection that has not completed a request's headers ``header_timeout`` seconds after it
    opened, or after the first byte of a further request arrived."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        header_timeout: float,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        """Wait at most the timeout for the headers of the request that begins now."""
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self._header_timeout, self._headers_overdue)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_overdue(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()  # its headers are incomplete: no request of it has begun

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that never sends a byte is timed too

    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:
            self._arm()  # the first bytes of a request (bytes of a body in progress arm nothing)
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def protocol_factory(header_timeout: float) -> type[asyncio.Protocol]:
    """What to pass as uvicorn's ``http``: :class:`HeaderTimeoutProtocol` with this timeout, as a partial
    that pickles (each worker process gets its own copy)."""
    return cast(
        "type[asyncio.Protocol]", functools.partial(HeaderTimeoutProtocol, header_timeout=header_timeout)
    )


class BrokenOffFilter(logging.Filter):
    """Leaves out uvicorn's "Exception in ASGI application" and its traceback for a response broken off on
    purpose (:class:`~cache_server.errors.ResponseBrokenOff`, such as a damaged blob found mid-stream):
    uvicorn still closes the connection, and the one line saying why was logged where it was found."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info is not None and isinstance(record.exc_info[1], ResponseBrokenOff))


def log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration with :class:`BrokenOffFilter` on its error logger (each worker
    process applies it as it starts)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["broken_off"] = {"()": f"{__name__}.BrokenOffFilter"}
    config["loggers"]["uvicorn.error"]["filters"] = ["broken_off"]
    return config


def dashboard_line(host: str, port: int) -> str:
    """Where the dashboard is: the host and port as served (every interface said in words)."""
    shown = f"[{host}]" if ":" in host else host
    line = f"dashboard: http://{shown}:{port}/"
    if host in EVERY_INTERFACE:
        line += " (listening on every interface: open it at this machine's name or address)"
    return line


class _Server(Server):
    """uvicorn's server, which also says where the dashboard is once its socket listens."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.should_exit or not self.servers:
            return  # it could not bind: uvicorn said why
        port = self.servers[0].sockets[0].getsockname()[1]
        log.info("%s", dashboard_line(self.config.host, port))


def serve(config: Config) -> bool:
    """Run the server until it is told to stop; False if it could not start (uvicorn logged why)."""
    server = _Server(config)
    try:
        if config.workers > 1:
            sock = config.bind_socket()  # the workers share the socket this process listens on
            log.info("%s", dashboard_line(config.host, sock.getsockname()[1]))
            Multiprocess(config, sockets=[sock]).run()
            return True
        server.run()
    except KeyboardInterrupt:  # as uvicorn.run: Ctrl-C before its own handlers are in place
        pass
    return server.started
