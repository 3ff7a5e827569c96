"""A scripted HTTP server on a loopback port, for failure injection: every request goes to a function.

def answer(request: Recorded) -> Reply:
    return Reply(503)

with StubHttpServer(answer) as stub:
    ...  # point a client at stub.url
stub.requests  # every request it received, in order
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["Recorded", "Reply", "StubHttpServer", "json_reply"]


@dataclass
class Recorded:
    """One request the stub received."""

    method: str
    path: str  # percent-decoded
    query: dict[str, str]  # the last value of each parameter
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass
class Reply:
    """What to answer. ``cut_after``: announce the whole body, send that many bytes, drop the connection."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    cut_after: int | None = None


def json_reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
    headers = {"Content-Type": "application/json", **(headers or {})}
    return Reply(status, headers, json.dumps(payload).encode())


class StubHttpServer:
    """Answers each request with ``answer(request)``; records them all in :attr:`requests`."""

    def __init__(self, answer: Callable[[Recorded], Reply]) -> None:
        self.answer = answer
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed ACK

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                request = Recorded(
                    method=self.command,
                    path=unquote(parts.path),
                    query={k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()},
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self._read_body(),
                )
                with stub._lock:
                    stub.requests.append(request)
                reply = stub.answer(request)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                if reply.cut_after is not None:
                    self.send_header("Connection", "close")
                self.end_headers()
                if reply.cut_after is None:
                    self.wfile.write(reply.body)
                    return
                self.wfile.write(reply.body[: reply.cut_after])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

            def _read_body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = bytearray()
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return bytes(data)
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="http-stub", daemon=True)

    def __enter__(self) -> StubHttpServer:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
