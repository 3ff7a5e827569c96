"""Hostile clients against a real server process (tests/api/test_hostile_clients.py with one worker,
tests/reliability/test_hostile_clients_workers.py with two): the short timeouts such a server runs with, and
a raw HTTP/1.1 client over sockets that stalls and hangs up where a well-behaved library would not."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import httpx

from cache_protocol import SHA256_HEADER
from tests.support.server import LiveServer

__all__ = [
    "BODY_TIMEOUT",
    "SHORT_TIMEOUTS",
    "SLOTS",
    "UPLOAD_ROUTE",
    "UPLOAD_WAIT",
    "connect",
    "is_closed",
    "nothing_stored",
    "put_head",
    "read_response",
    "timed_get",
]

BODY_TIMEOUT = 2.0
UPLOAD_WAIT = 1.0
SLOTS = 16
SHORT_TIMEOUTS = {
    "XLA_CACHE_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
    "XLA_CACHE_UPLOAD_WAIT_SECONDS": str(UPLOAD_WAIT),
    "XLA_CACHE_MAX_CONCURRENT_UPLOADS": str(SLOTS),
}
UPLOAD_ROUTE = "/v1/namespaces/{namespace}/entries/{key:path}"


def connect(server: LiveServer, timeout: float = 10.0) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=timeout)


def put_head(namespace: str, key: str, length: int) -> bytes:
    return (
        f"PUT /v1/namespaces/{namespace}/entries/{key} HTTP/1.1\r\nHost: x\r\n"
        f"Content-Length: {length}\r\n{SHA256_HEADER}: {'0' * 64}\r\n\r\n"
    ).encode()


def read_response(sock: socket.socket, deadline: float) -> tuple[int | None, bytes]:
    """The status and body of one response (``None`` when the server closed without one)."""
    data = b""
    while b"\r\n\r\n" not in data:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            piece = sock.recv(65536)
        except ConnectionResetError:
            piece = b""
        if not piece:
            return None, data
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    while length and len(body) < int(length.group(1)):
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        piece = sock.recv(65536)
        if not piece:
            break
        body += piece
    return int(head.split(b" ", 2)[1]), body


def is_closed(sock: socket.socket, deadline: float) -> bool:
    """Whether the server closes the connection before ``deadline``."""
    try:
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def timed_get(url: str) -> tuple[int, float]:
    started = time.monotonic()
    status = httpx.get(url, timeout=5.0).status_code
    return status, time.monotonic() - started


def nothing_stored(data_dir: Path, namespace: str) -> bool:
    return (
        not (data_dir / "blobs" / namespace).exists() and list((data_dir / "blobs" / ".tmp").iterdir()) == []
    )
