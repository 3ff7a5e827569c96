"""ASGI middleware of the HTTP layer."""

from __future__ import annotations

import logging
import re

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cache_server.api.errors import cache_error_response, error_response
from cache_server.errors import BodyTimeout, BodyTooLarge, CacheError, ClientAborted

__all__ = ["BoundedBodies", "RejectEncodedSeparators", "is_entry_upload"]

log = logging.getLogger(__name__)

# A percent-encoded slash, backslash or control character (NUL, newline, ...) would be decoded into the path
# before routing and then split a name in two, reach the name checks in a confusing form, or miss the routes
# altogether (a key route's pattern does not match a newline: 404 instead of 400); refuse it up front.
_ENCODED = re.compile(rb"%(2f|5c|[01][0-9a-f]|7f)", re.IGNORECASE)

# PUT /v1/namespaces/{namespace}/entries/{key} and POST /v1/namespaces/{namespace}/entries (a bulk upload):
# the routes whose body is streamed, not read whole.
_ENTRY_UPLOAD = re.compile(r"/v1/namespaces/[^/]+/entries/.")
_BULK_UPLOAD = re.compile(r"/v1/namespaces/[^/]+/entries/?")


class RejectEncodedSeparators:
    """Answer 400 to any request whose raw path holds ``%2F``, ``%5C``, or ``%00`` to ``%1F`` or ``%7F``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or b""
            if _ENCODED.search(raw):
                response = error_response(
                    400,
                    "invalid_name",
                    "The path contains an encoded slash, backslash, NUL or other control character; names "
                    "are single path segments of letters, digits, '.', '_' and '-'.",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def is_entry_upload(scope: Scope) -> bool:
    """Whether the request uploads entries (streamed, each bounded by ``XLA_CACHE_MAX_ENTRY_BYTES``)."""
    if scope["method"] == "POST":
        return _BULK_UPLOAD.fullmatch(scope["path"]) is not None
    return scope["method"] == "PUT" and _ENTRY_UPLOAD.match(scope["path"]) is not None


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


class BoundedBodies:
    """Reads every request body but an entry upload's before the app sees it, within bounds.

    The routes behind it take small JSON bodies, which they would read whole anyway. Here a body longer
    than ``max_bytes`` is refused with 413 before it is read (a larger ``Content-Length``) or as soon as
    the count passes the limit (a chunked body), so no client can make the server hold more than
    ``max_bytes`` of one body; a body that pauses for ``idle_timeout`` seconds ends with 408, and a client
    that disconnects mid-body is counted as 499 (:class:`~cache_server.errors.ClientAborted`). Entry
    uploads stream through untouched: their route bounds them (size, pauses, concurrency) itself.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, idle_timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.idle_timeout = idle_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_entry_upload(scope) or not self._has_body(scope):
            await self.app(scope, receive, send)
            return
        try:
            body = await self._read(scope, receive)
        except CacheError as exc:
            await cache_error_response(exc)(scope, receive, send)
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()  # after the body: http.disconnect, when the client goes
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    @staticmethod
    def _has_body(scope: Scope) -> bool:
        length = _header(scope, b"content-length")
        return _header(scope, b"transfer-encoding") is not None or (length is not None and length != b"0")

    def _too_large(self, declared: int | None) -> BodyTooLarge:
        size = f"{declared} bytes long" if declared is not None else f"longer than {self.max_bytes} bytes"
        return BodyTooLarge(
            f"The request body is {size}; request bodies other than entry uploads may be at most "
            f"{self.max_bytes} bytes (XLA_CACHE_MAX_JSON_BYTES)."
        )

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise self._too_large(int(declared))
        pieces: list[bytes] = []
        size = 0
        while True:
            with anyio.move_on_after(self.idle_timeout) as waited:
                message = await receive()
            if waited.cancelled_caught:
                raise BodyTimeout(
                    f"The request body stopped arriving: nothing for {self.idle_timeout:g} s after {size} "
                    "bytes (XLA_CACHE_BODY_TIMEOUT_SECONDS)."
                )
            if message["type"] == "http.disconnect":
                log.info(
                    "client aborted its request %s %s after %d body bytes",
                    scope["method"],
                    scope["path"],
                    size,
                )
                raise ClientAborted(f"The client went away after sending {size} bytes of the body.")
            piece = message.get("body", b"")
            size += len(piece)
            if size > self.max_bytes:
                raise self._too_large(None)
            if piece:
                pieces.append(piece)
            if not message.get("more_body", False):
                return b"".join(pieces)
