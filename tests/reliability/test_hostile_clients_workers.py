"""Stalled and aborted clients against ``serve --workers 2``, where tests/api/test_hostile_clients.py runs one
worker: every worker bounds its own uploads, a stall on one worker never blocks the other routes of either,
each stalled request ends (408, or 503 for those that waited for a slot in vain), an abort is a 499, nothing
of theirs is stored, and the counts of both workers add up in one ``/metrics``.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.support.api import put_at
from tests.support.hostile import (
    BODY_TIMEOUT,
    SHORT_TIMEOUTS,
    SLOTS,
    UPLOAD_ROUTE,
    UPLOAD_WAIT,
    connect,
    nothing_stored,
    put_head,
    read_response,
    timed_get,
)
from tests.support.server import LiveServer, run_server
from tests.support.wait import wait_until

STALLED = 80  # more than the two workers' slots together
ABORTED = 10
MIB = 1024 * 1024


def both_workers_up(server: LiveServer) -> None:
    started = "Application startup complete."
    wait_until(lambda: server.log().count(started) >= 2, timeout=60, message=server.log)


def counted(server: LiveServer, status: int, count: int) -> str | None:
    """The scrape, once it counts ``count`` uploads answered ``status`` (both workers summed)."""
    metrics = scrape(server)
    line = f'method="PUT",route="{UPLOAD_ROUTE}",status="{status}"}} {float(count)}'
    return metrics if line in metrics else None


def scrape(server: LiveServer) -> str:
    return httpx.get(f"{server.url}/metrics").text


def abort_upload(server: LiveServer, key: str) -> None:
    """Announce 3 MiB, send 1 MiB, hang up."""
    with connect(server) as sock:
        sock.sendall(put_head("aborted", key, 3 * MIB) + b"x" * MIB)


@pytest.mark.timeout(120)
def test_stalled_and_aborted_uploads_on_two_workers(tmp_path: Path, server_env: dict[str, str]) -> None:
    with run_server(tmp_path, {**SHORT_TIMEOUTS, **server_env}, workers=2) as server:
        both_workers_up(server)
        assert put_at(server.url, "ok", "1", b"stored before the stall").status_code == 201
        # each worker knows there are two: clients stream at most two bundles at once
        for _ in range(4):
            assert httpx.get(f"{server.url}/v1/namespaces/ok/manifest").json()["bundle_streams"] == 2
        for i in range(ABORTED):
            abort_upload(server, f"a{i}")
        wait_until(lambda: counted(server, 499, ABORTED), timeout=20, message=lambda: scrape(server))
        with ExitStack() as stack:
            stalled = [stack.enter_context(connect(server)) for _ in range(STALLED)]
            started = time.monotonic()
            for i, sock in enumerate(stalled):
                sock.sendall(put_head("stall", f"k{i}", 1000) + b"x" * 10)
            # While every slot of both workers is held, the rest of the server answers at once.
            latencies = []
            for _ in range(10):
                for path in ("/healthz", "/readyz", "/v1/namespaces/ok/entries/1", "/metrics"):
                    status, seconds = timed_get(server.url + path)
                    assert status == 200, path
                    latencies.append(seconds)
            checked = time.monotonic() - started
            answers = [read_response(sock, started + BODY_TIMEOUT + UPLOAD_WAIT + 8) for sock in stalled]
        statuses = [status or 0 for status, _ in answers]  # 0: closed without an answer
        assert set(statuses) <= {408, 503}, statuses
        assert statuses.count(408) >= SLOTS, statuses  # at least one worker's slots timed out
        for answered_with, body in answers:
            assert json.loads(body)["error"] == ("body_timeout" if answered_with == 408 else "uploads_busy")
        assert max(latencies) < 1.5, latencies

        assert nothing_stored(tmp_path, "stall") and nothing_stored(tmp_path, "aborted")
        assert put_at(server.url, "ok", "2", b"after the stall").status_code == 201
        metrics = scrape(server)
        assert counted(server, 408, statuses.count(408)) and counted(server, 503, statuses.count(503))
        assert 'status="500"' not in metrics
        log = server.log()
        assert "Traceback" not in log and "unhandled error" not in log
        answered = {status: statuses.count(status) for status in sorted(set(statuses))}
        print(
            f"\n2 workers, {ABORTED} aborted uploads then {STALLED} stalled ones: aborts counted 499 across "
            f"both workers; stalled answered {answered}; 40 other requests meanwhile, slowest "
            f"{max(latencies):.3f} s (all within {checked:.1f} s of the stall); nothing stored"
        )


@pytest.mark.timeout(60)
def test_a_client_that_hangs_up_while_waiting_for_a_slot_is_a_499(
    tmp_path: Path, server_env: dict[str, str]
) -> None:
    env = {
        **SHORT_TIMEOUTS,
        "XLA_CACHE_MAX_CONCURRENT_UPLOADS": "1",
        "XLA_CACHE_BODY_TIMEOUT_SECONDS": "30",  # the slot stays held for the whole test
        **server_env,
    }
    with run_server(tmp_path, env) as server, connect(server) as holder:
        holder.sendall(put_head("busy", "held", 1000) + b"x" * 10)
        probe = put_at(server.url, "ok", "probe", b"probe")  # proves the one slot is held: 503 after the wait
        assert probe.status_code == 503 and probe.json()["error"] == "uploads_busy"
        abort_upload(server, "waiting")  # hangs up while it waits for the slot
        wait_until(
            lambda: counted(server, 499, 1) or counted(server, 503, 2),
            timeout=UPLOAD_WAIT + 10,
            message=lambda: scrape(server),
        )
        assert counted(server, 499, 1), "the client that hung up while waiting was counted 503"
