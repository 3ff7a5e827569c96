"""ASGI middleware of the HTTP layer."""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from cache_server.api.errors import error_response

__all__ = ["RejectEncodedSeparators"]

# A percent-encoded slash, backslash or NUL would be decoded into the path before routing and then
# either split a name in two or reach the name checks in a confusing form; refuse it up front.
_ENCODED = re.compile(rb"%(2f|5c|00)", re.IGNORECASE)


class RejectEncodedSeparators:
    """Answer 400 to any request whose raw path holds ``%2F``, ``%5C`` or ``%00``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or b""
            if _ENCODED.search(raw):
                response = error_response(
                    400,
                    "invalid_name",
                    "The path contains an encoded slash, backslash or NUL; names are single path segments "
                    "of letters, digits, '.', '_' and '-'.",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
