"""Hostile clients against a real ``xla-cache-server serve`` process: stalled, aborted and oversized bodies.

Each test speaks raw HTTP/1.1 over sockets where a well-behaved client library would not misbehave, and is
bounded to seconds: the server runs with a short body timeout and upload wait.
"""

from __future__ import annotations

import json
import re
import select
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from cache_protocol import SHA256_HEADER
from tests.support.api import sha
from tests.support.hostile import (
    BODY_TIMEOUT,
    SHORT_TIMEOUTS,
    SLOTS,
    UPLOAD_ROUTE,
    UPLOAD_WAIT,
    connect,
    is_closed,
    nothing_stored,
    put_head,
    read_response,
    timed_get,
)
from tests.support.process_tree import peak_rss_mib
from tests.support.server import LiveServer, run_server
from tests.support.tcp_queues import read_by_server
from tests.support.wait import wait_until

MIB = 1024 * 1024


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    with run_server(tmp_path, SHORT_TIMEOUTS) as srv:
        yield srv


def test_60_stalled_uploads_do_not_starve_the_other_routes(server: LiveServer) -> None:
    """60 uploads that declare 1,000 bytes and send 10: the rest of the server answers at once."""
    stored = b"stored before the stall"
    entry_url = f"{server.url}/v1/namespaces/ok/entries/1"
    assert httpx.put(entry_url, content=stored, headers={SHA256_HEADER: sha(stored)}).status_code == 201
    with ExitStack() as stack:
        stalled = [stack.enter_context(connect(server)) for _ in range(60)]
        started = time.monotonic()
        for i, sock in enumerate(stalled):
            sock.sendall(put_head("stall", f"k{i}", 1000) + b"x" * 10)
        # until every stalled upload has reached the server: 16 hold a slot, 44 wait for one
        wait_until(
            lambda: read_by_server(stalled), timeout=10, interval=0.01, message="the stalls never arrived"
        )

        latencies = {}
        for path in ("/healthz", "/readyz", "/v1/namespaces/ok/entries/1", "/metrics"):
            status, seconds = timed_get(server.url + path)
            assert status == 200, path
            latencies[path] = seconds
        assert httpx.get(entry_url, timeout=5.0).content == stored
        assert time.monotonic() - started < BODY_TIMEOUT, "the checks ran after the stall ended"
        assert max(latencies.values()) < 1.5, latencies

        # Every stalled request ends: 408 for those that held a slot, 503 for those that waited in vain.
        deadline = started + BODY_TIMEOUT + UPLOAD_WAIT + 5
        answers = [read_response(sock, deadline) for sock in stalled]
        elapsed = time.monotonic() - started
        statuses = [status for status, _ in answers]
        assert set(statuses) <= {408, 503}, statuses
        assert statuses.count(408) >= SLOTS, statuses
        for status, body in answers:
            expected = "body_timeout" if status == 408 else "uploads_busy"
            assert json.loads(body)["error"] == expected
        assert BODY_TIMEOUT <= elapsed < BODY_TIMEOUT + UPLOAD_WAIT + 4, elapsed
        # A stalled request that got 408 has its connection closed (the rest of its body may still come).
        timed_out = [sock for sock, (status, _) in zip(stalled, answers, strict=True) if status == 408]
        assert all(is_closed(sock, time.monotonic() + 2) for sock in timed_out)

    data_dir = server.log_path.parent
    assert nothing_stored(data_dir, "stall")
    # The slots are free again: a real upload goes through.
    fresh = b"after the stall"
    response = httpx.put(
        f"{server.url}/v1/namespaces/ok/entries/2", content=fresh, headers={SHA256_HEADER: sha(fresh)}
    )
    assert response.status_code == 201, response.text
    log = server.log()
    assert "Traceback" not in log
    assert re.search(r"the upload of stall/k\d+ stopped arriving after 10 bytes; refused with 408", log)


def test_a_trickling_upload_ends_in_408_though_it_never_pauses_long(tmp_path: Path) -> None:
    """A byte every half second never pauses for the body timeout, but stays under the minimum rate."""
    env = {**SHORT_TIMEOUTS, "XLA_CACHE_MIN_UPLOAD_BYTES_PER_SECOND": "100"}
    with run_server(tmp_path, env) as srv, connect(srv) as sock:
        started = time.monotonic()
        sock.sendall(put_head("trickle", "k", 10_000))
        while not select.select([sock], [], [], 0.5)[0]:  # until the server answers
            assert time.monotonic() - started < BODY_TIMEOUT + 10, "no answer"
            sock.sendall(b"x")
        elapsed = time.monotonic() - started
        status, body = read_response(sock, time.monotonic() + 5)
        assert status == 408, (status, body)
        detail = json.loads(body)["detail"]
        assert "arrived too slowly" in detail and "XLA_CACHE_MIN_UPLOAD_BYTES_PER_SECOND" in detail
        # Allowed: the body timeout's grace plus what the bytes sent earn at 100 bytes/s (a few ms).
        assert BODY_TIMEOUT <= elapsed < BODY_TIMEOUT + 2, elapsed
        assert nothing_stored(srv.log_path.parent, "trickle")
        assert re.search(
            r"the upload of trickle/k arrived too slowly after \d+ bytes; refused with 408", srv.log()
        )


def test_an_upload_waits_for_a_slot_and_503_says_when_to_retry(tmp_path: Path) -> None:
    with run_server(tmp_path, {**SHORT_TIMEOUTS, "XLA_CACHE_MAX_CONCURRENT_UPLOADS": "1"}) as srv:
        with connect(srv) as stalled:
            stalled.sendall(put_head("busy", "held", 1000) + b"x" * 10)
            # until the stalled upload has reached the server (and so holds the one slot)
            wait_until(
                lambda: read_by_server([stalled]), timeout=10, interval=0.01, message="no stall arrived"
            )
            data = b"legitimate"
            started = time.monotonic()
            response = httpx.put(
                f"{srv.url}/v1/namespaces/busy/entries/other",
                content=data,
                headers={SHA256_HEADER: sha(data)},
                timeout=10,
            )
            waited = time.monotonic() - started
            assert response.status_code == 503
            assert response.json()["error"] == "uploads_busy"
            assert response.headers["retry-after"] == "5"
            assert UPLOAD_WAIT * 0.9 <= waited < UPLOAD_WAIT + 1.5, waited
            status, _ = read_response(stalled, time.monotonic() + BODY_TIMEOUT + 3)
            assert status == 408
        # With the slot back, the same upload is stored.
        response = httpx.put(
            f"{srv.url}/v1/namespaces/busy/entries/other",
            content=data,
            headers={SHA256_HEADER: sha(data)},
        )
        assert response.status_code == 201


def test_aborted_upload_is_one_log_line_a_499_and_nothing_stored(server: LiveServer) -> None:
    with connect(server) as sock:
        sock.sendall(put_head("aborted", "k", 3 * MIB) + b"x" * MIB)
        # The pause before the hang-up is part of the test: the server must have handed the whole MiB to the
        # upload, not only read it off the socket (what a test can see from outside the server process).
        time.sleep(0.3)
    line = "client aborted the upload of aborted/k after 1048576 bytes"
    wait_until(lambda: line in server.log(), timeout=10, message=server.log)
    wait_until(lambda: '"status":499' in server.log(), timeout=5, message=server.log)
    log = server.log()
    assert log.count("aborted/k") == 1
    assert "Traceback" not in log
    assert "unhandled error" not in log
    access = [json.loads(x) for x in log.splitlines() if x.startswith("{") and '"method":"PUT"' in x]
    assert [(a["status"], a["bytes_in"], a["bytes_out"]) for a in access] == [(499, MIB, 0)]
    assert nothing_stored(server.log_path.parent, "aborted")
    metrics = httpx.get(f"{server.url}/metrics").text
    assert f'method="PUT",route="{UPLOAD_ROUTE}",status="499"}} 1.0' in metrics, metrics
    assert 'status="500"' not in metrics


def test_stalled_json_body_ends_in_408_and_a_closed_connection(server: LiveServer) -> None:
    with connect(server) as sock:
        started = time.monotonic()
        sock.sendall(
            b"POST /v1/namespaces/ns/missing HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"keys": ['
        )
        status, body = read_response(sock, started + BODY_TIMEOUT + 5)
        assert status == 408
        assert json.loads(body)["error"] == "body_timeout"
        assert BODY_TIMEOUT * 0.9 <= time.monotonic() - started < BODY_TIMEOUT + 3
        assert is_closed(sock, time.monotonic() + 2)


def test_json_body_over_the_limit_is_413_without_the_server_growing(tmp_path: Path) -> None:
    """The default 4 MiB limit: a 200 MB Content-Length is refused before one byte of it is sent, and a
    200 MiB chunked body once 4 MiB have come; the server's peak memory grows by no more than that."""
    with run_server(tmp_path, SHORT_TIMEOUTS) as srv:
        keys_url = f"{srv.url}/v1/namespaces/ns/missing"
        assert httpx.post(keys_url, json={"keys": ["a"]}).status_code == 200  # warm the code paths
        before = peak_rss_mib(srv.pid)
        head = b"POST /v1/namespaces/ns/missing HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"

        with connect(srv) as sock:
            started = time.monotonic()
            sock.sendall(head + b"Content-Length: 200000000\r\n\r\n")
            status, body = read_response(sock, started + 5)
            assert status == 413, body
            assert time.monotonic() - started < 1.0
            assert json.loads(body)["error"] == "body_too_large"
            assert "XLA_CACHE_MAX_JSON_BYTES" in json.loads(body)["detail"]

        with connect(srv) as sock:
            sock.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
            piece = b"%x\r\n%s\r\n" % (MIB, b" " * MIB)
            try:
                for _ in range(200):
                    sock.sendall(piece)
                sock.sendall(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            status, body = read_response(sock, time.monotonic() + 10)
            assert status == 413, body

        growth = peak_rss_mib(srv.pid) - before
        assert growth < 48, f"the server's peak memory grew by {growth:.0f} MiB"
        # Both refusals are counted under their route, though refused before routing.
        metrics = httpx.get(f"{srv.url}/metrics").text
        route = "/v1/namespaces/{namespace}/missing"
        assert f'method="POST",route="{route}",status="413"}} 2.0' in metrics, metrics
        assert 'route="unmatched"' not in metrics
        assert "Traceback" not in srv.log()
