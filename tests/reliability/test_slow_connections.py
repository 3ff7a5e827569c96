"""Idle and trickling connections cannot pile up, against a real ``xla-cache-server serve``.

Before: uvicorn timed only the idle time between requests of a keep-alive connection (and any byte reset
it), so 1,000 connections sending their headers a byte now and then (slowloris) were all kept open, and a
connection that never sent anything was kept for ever. Now every connection must complete a request's
headers within ``XLA_CACHE_HEADER_TIMEOUT_SECONDS`` (``cache_server.cli.serve``), and beyond
``XLA_CACHE_MAX_CONNECTIONS`` a request is answered 503 and its connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.http1 import Http1Connection
from tests.support.server import LiveServer, run_server

HEADER_TIMEOUT = 1.0
MAX_CONNECTIONS = 300
TRICKLERS = 250  # under the cap: /healthz must still be answered while they trickle
TRICKLE_EVERY = 0.2  # seconds between header bytes: uvicorn's keep-alive timer alone would never fire
KEEP_ALIVE = 2  # longer than the header timeout: the idle time between requests is the keep-alive's
SLACK = 1.5  # seconds beyond the timeout for the close to be seen, on a busy two-core machine


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    env = {
        "XLA_CACHE_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
        "XLA_CACHE_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        "XLA_CACHE_KEEP_ALIVE_SECONDS": str(KEEP_ALIVE),
    }
    with run_server(tmp_path_factory.mktemp("slow-connections"), env) as live:
        yield live


def _port(server: LiveServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


async def _closed_after(reader: asyncio.StreamReader, opened: float) -> float:
    """Seconds from ``opened`` until the server closed the connection (it sends nothing before)."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(4096):
            pass
    return time.monotonic() - opened


async def _trickle(writer: asyncio.StreamWriter, stop: asyncio.Event) -> int:
    """Send a header a byte at a time until the server closes the connection; return the bytes sent."""
    sent = 0
    header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
    while not stop.is_set() and not writer.is_closing():
        try:
            writer.write(header[sent : sent + 1])
            await writer.drain()
        except ConnectionError:
            break
        sent += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), TRICKLE_EVERY)
    return sent


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """Ask for /healthz on a connection of the test's own and read the whole answer; return its status."""
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in lines if line.startswith(b"content-length:"))
    await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


async def _second_request_trickles(port: int, stop: asyncio.Event) -> float:
    """One complete request, then the next one's headers trickled on the same (kept-alive) connection:
    seconds from its first byte until the server closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        assert await _answer(reader, writer) == 200
        began = time.monotonic()
        trickle = asyncio.create_task(_trickle(writer, stop))
        closed = await _closed_after(reader, began)
        await trickle
        return closed
    finally:
        writer.close()


async def _slowloris(port: int) -> tuple[list[float], list[float]]:
    """Open ``TRICKLERS`` trickling connections (one of them after a first, complete request); poll /healthz
    until the server has closed them all."""
    opened = time.monotonic()
    streams = await asyncio.gather(
        *(asyncio.open_connection("127.0.0.1", port) for _ in range(TRICKLERS - 1))
    )
    stop = asyncio.Event()
    closes = [asyncio.create_task(_closed_after(reader, opened)) for reader, _ in streams]
    closes.append(asyncio.create_task(_second_request_trickles(port, stop)))
    trickles = [asyncio.create_task(_trickle(writer, stop)) for _, writer in streams]
    healthz: list[float] = []
    try:
        async with Http1Connection("127.0.0.1", port) as http:
            deadline = opened + HEADER_TIMEOUT + SLACK + 10
            while not all(task.done() for task in closes) and time.monotonic() < deadline:
                start = time.monotonic()
                status, _, _ = await http.request("GET", "/healthz")
                assert status == 200
                healthz.append(time.monotonic() - start)
                await asyncio.wait(closes, timeout=0.05)  # between polls: any close wakes us
        assert all(task.done() for task in closes), "some trickling connections were never closed"
        return [task.result() for task in closes], healthz
    finally:
        stop.set()
        await asyncio.gather(*trickles)
        for _, writer in streams:
            writer.close()


def test_trickling_connections_are_closed_and_healthz_answers_meanwhile(server: LiveServer) -> None:
    closed, healthz = asyncio.run(_slowloris(_port(server)))
    slowest = max(closed)
    print(
        f"\n{TRICKLERS} connections trickling a header byte every {TRICKLE_EVERY} s (one of them its second "
        f"request): all closed after {min(closed):.2f}-{slowest:.2f} s (timeout {HEADER_TIMEOUT} s); the "
        f"second request's after {closed[-1]:.2f} s; /healthz {len(healthz)} times meanwhile, slowest "
        f"{max(healthz) * 1000:.0f} ms"
    )
    assert min(closed) >= HEADER_TIMEOUT * 0.9 and slowest <= HEADER_TIMEOUT + SLACK
    assert healthz and max(healthz) < 1.0


async def _over_the_cap(port: int) -> tuple[int, bytes, int, float, float]:
    """Hold ``MAX_CONNECTIONS`` silent connections, ask for /healthz on one more, then again once the
    silent ones are closed; also time how long an idle keep-alive connection lasts after an answer."""
    opened = time.monotonic()
    streams = await asyncio.gather(
        *(asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_CONNECTIONS))
    )
    closes = [asyncio.create_task(_closed_after(reader, opened)) for reader, _ in streams]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await reader.read()  # the server closes it after the answer
        writer.close()
        refused = int(answer.split(b" ", 2)[1])
        silent_closed = max(await asyncio.gather(*closes))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        status = await _answer(reader, writer)
        idle = await _closed_after(reader, time.monotonic())  # kept alive, idle: how long until closed
        writer.close()
        return refused, answer, status, silent_closed, idle
    finally:
        for _, stream_writer in streams:
            stream_writer.close()


def test_connections_over_the_cap_are_answered_503_and_silent_ones_closed(server: LiveServer) -> None:
    refused, answer, status, silent_closed, idle = asyncio.run(_over_the_cap(_port(server)))
    print(
        f"\n{MAX_CONNECTIONS} silent connections held: one more got {refused}; the silent ones were closed "
        f"after {silent_closed:.2f} s; then /healthz {status}; an idle keep-alive connection lasted "
        f"{idle:.2f} s"
    )
    assert refused == 503 and b"connection: close" in answer.lower()
    assert silent_closed <= HEADER_TIMEOUT + SLACK
    assert status == 200
    assert KEEP_ALIVE * 0.9 <= idle <= KEEP_ALIVE + SLACK  # not cut to the header timeout


def test_a_long_poll_outlasts_the_header_timeout(server: LiveServer) -> None:
    """Only headers are timed: a request that has begun (a feed long poll here) waits as long as it asked."""
    wait = 2 * HEADER_TIMEOUT
    with httpx.Client(base_url=server.url, timeout=30) as http:
        began = time.monotonic()
        response = http.get("/v1/namespaces/quiet/feed", params={"after": 0, "wait": wait})
        took = time.monotonic() - began
    assert response.status_code == 200 and response.json()["entries"] == []
    assert took >= wait * 0.9
