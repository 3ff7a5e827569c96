"""Request metrics and the structured access log: one JSON line per request.

The line holds the method, the path (never the query string, which may carry a dashboard token), the
route template, status, duration, bytes in and out, the namespace, the client address, and the *name* of
the token the request was allowed with (never the token). uvicorn's own access log is turned off by
``xla-cache-server serve`` so nothing else logs requests.

A client that goes away before its request body is complete (an aborted upload) is counted and logged with
status 499, as nginx does: the answer is never sent, and it is not a server error. A body that stops
arriving is 408, one over its limit 413.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from fastapi.routing import RouteContext, iter_route_contexts
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cache_server import metrics
from cache_server.api.auth import principal_name
from cache_server.api.errors import CLIENT_CLOSED_REQUEST
from cache_server.background.activity import Activity
from cache_server.domain import utcnow

__all__ = ["ACCESS_LOGGER", "Telemetry", "configure_access_log"]

ACCESS_LOGGER = "cache_server.access"
_HANDLER_MARK = "_xla_cache_access_handler"

access_log = logging.getLogger(ACCESS_LOGGER)


def configure_access_log() -> None:
    """Write access lines bare (just the JSON) to stderr, apart from the other logs; idempotent."""
    if not any(getattr(h, _HANDLER_MARK, False) for h in access_log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        setattr(handler, _HANDLER_MARK, True)
        access_log.addHandler(handler)
    access_log.setLevel(logging.INFO)
    access_log.propagate = False


class Telemetry:
    """Outermost middleware: counts, times and logs every HTTP request, and tells ``activity`` when one
    is in flight."""

    def __init__(
        self, app: ASGIApp, routes: Sequence[BaseRoute] = (), activity: Activity | None = None
    ) -> None:
        self.app = app
        self._activity = activity or Activity()
        self._routes = routes  # to name the route of a request answered before routing (an early 413)
        self._flat: list[RouteContext] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        seen = {"status": 500, "in": 0, "out": 0}

        async def counting_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen["in"] += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            elif message["type"] == "http.response.body":
                seen["out"] += len(message.get("body", b""))
            await send(message)

        # A long poll of the change feed mostly waits: it does not make the process busy.
        busy = not scope["path"].endswith("/feed")
        if busy:
            self._activity.begin()
        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            if busy:
                self._activity.end()
            if seen["status"] == CLIENT_CLOSED_REQUEST:
                seen["out"] = 0  # the client was gone: nothing was sent
            self._record(scope, time.perf_counter() - started, seen)

    def _route(self, scope: Scope) -> tuple[str, dict[str, Any]]:
        """The request's route template and path parameters; ``unmatched`` for a path no route has (the
        label values stay bounded). A request refused before routing is matched here."""
        route = scope.get("route")
        if route is not None:
            return str(getattr(route, "path", "unmatched")), scope.get("path_params", {})
        if self._flat is None:  # the routes of included routers, each with its full path
            self._flat = list(iter_route_contexts(self._routes))
        for candidate in self._flat:
            match, child = candidate.matches(scope)
            if match is Match.FULL:
                return str(candidate.path), child.get("path_params", {})
        return "unmatched", {}

    def _record(self, scope: Scope, seconds: float, seen: dict[str, int]) -> None:
        route, path_params = self._route(scope)
        method = scope["method"]
        metrics.REQUESTS.labels(route, method, str(seen["status"])).inc()
        metrics.REQUEST_SECONDS.labels(route, method).observe(seconds)
        if seen["in"]:
            metrics.BYTES_RECEIVED.labels(route).inc(seen["in"])
        if seen["out"]:
            metrics.BYTES_SENT.labels(route).inc(seen["out"])
        if access_log.isEnabledFor(logging.INFO):
            client = scope.get("client")
            line: dict[str, Any] = {
                "time": utcnow().isoformat(timespec="milliseconds"),
                "method": method,
                "path": scope["path"],
                "route": route,
                "status": seen["status"],
                "duration_ms": round(seconds * 1000, 3),
                "bytes_in": seen["in"],
                "bytes_out": seen["out"],
                "namespace": path_params.get("namespace"),
                "client": client[0] if client else None,
                "token_name": principal_name(scope),
            }
            access_log.info(json.dumps(line, separators=(",", ":")))
