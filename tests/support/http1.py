"""A minimal HTTP/1.1 keep-alive client on asyncio streams, for load generators.

A load test on a small machine shares its cores with the server under test: a client that spends a few
milliseconds of Python per request (httpx does, for its generality) measures itself as much as the server.
This one writes the request line and headers, and reads the status, the headers and a ``Content-Length``
body (the server under test always sends one); about a tenth of the CPU per request.

    async with Http1Connection("127.0.0.1", port) as http:
        status, headers, body = await http.request("GET", "/healthz")

Not for anything else: no chunked bodies, no redirects, no TLS, one request at a time per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from types import TracebackType

__all__ = ["Http1Connection", "Http1Error"]


class Http1Error(Exception):
    """The server closed the connection, or answered something this client does not read."""


class Http1Connection:
    """One persistent connection; :meth:`request` sends one request and reads its whole answer."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Http1Connection:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):  # the server closed it first
                await self._writer.wait_closed()

    async def request(
        self, method: str, path: str, headers: Mapping[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        """Send a request; return the status, the headers (lower-case names) and the body."""
        assert self._reader is not None and self._writer is not None, "use Http1Connection with async with"
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await self._writer.drain()
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            raise Http1Error(f"the connection closed before an answer to {method} {path}") from exc
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        answer = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                answer[name.strip().lower()] = value.strip()
        if answer.get("transfer-encoding", "").lower() == "chunked":
            raise Http1Error(f"{method} {path} answered a chunked body")
        length = 0 if method == "HEAD" or status in (204, 304) else int(answer.get("content-length", "0"))
        try:
            content = await self._reader.readexactly(length)
        except asyncio.IncompleteReadError as exc:
            raise Http1Error(f"{method} {path}: the body broke off after {len(exc.partial)} bytes") from exc
        return status, answer, content
