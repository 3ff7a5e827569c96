"""Send a request body piece by piece (HTTP/1.1 chunked) over a raw socket until the server answers, as a
hostile client would: no declared length, and pieces that go on for as long as the server reads them."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tests.support.hostile import read_response

__all__ = ["Streamed", "stream_until_answered"]


@dataclass
class Streamed:
    """What the server answered (``status`` None: it closed without an answer), how many body bytes had
    been sent by then, and how long it took."""

    status: int | None
    body: bytes
    sent: int
    seconds: float


def _read_response(sock: socket.socket, deadline: float) -> tuple[int | None, bytes]:
    try:
        return read_response(sock, deadline)
    except TimeoutError:
        return None, b""


def stream_until_answered(
    url: str,
    method: str,
    path: str,
    pieces: Iterable[bytes],
    *,
    headers: Mapping[str, str] | None = None,
    pace: float = 0.0,
    timeout: float = 30.0,
    length: int | None = None,
) -> Streamed:
    """Send ``pieces`` as one chunked body to ``url`` (``http://host:port``), each after waiting up to
    ``pace`` seconds for an answer, and stop at the first answer (or when the server stops reading, or
    after ``timeout``); the body is ended properly if the pieces run out first. With ``length`` the body
    is declared that long (``Content-Length``) and sent as it is instead."""
    host, port = url.removeprefix("http://").split(":")
    started = time.monotonic()
    deadline = started + timeout
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        framing = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
        head = [f"{method} {path} HTTP/1.1", "Host: test", framing]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        sent = 0
        ended = True
        for piece in pieces:
            answered, _, _ = select.select([sock], [], [], pace)
            if answered or time.monotonic() > deadline:
                ended = False
                break
            try:
                sock.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n" if length is None else piece)
            except OSError:  # the server answered and closed, or stopped reading
                ended = False
                break
            sent += len(piece)
        if ended and length is None:
            sock.sendall(b"0\r\n\r\n")
        status, body = _read_response(sock, deadline)
    return Streamed(status, body, sent, time.monotonic() - started)
