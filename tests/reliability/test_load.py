"""Load: 200 concurrent clients for 15 s (``XLA_CACHE_TEST_LOAD_SECONDS``: 60 for the recorded run) against a
real ``serve --workers 2`` on PostgreSQL, each with its own connection, in a mix of what training jobs do
(download, check, upload, ask what is missing, read the manifest, miss). No request may fail, the server's
memory must stay flat, and the latencies are reported.

The clients are asyncio tasks in this process, each on a connection of its own, speaking HTTP/1.1 through
tests/support/http1.py (httpx would spend as much CPU per request as the server does). The report says how
the CPU was shared between the clients and the server, so the figures can be read for what they are:
latencies as one 2-core machine sees them, with the clients on the same cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from cache_protocol import SHA256_HEADER
from cache_server.index.migrate import upgrade
from tests.support.api import sha
from tests.support.deployment import Deployment
from tests.support.harness import MIB
from tests.support.http1 import Http1Connection, Http1Error
from tests.support.process_tree import rss_bytes, tree
from tests.support.server import LiveServer, run_server
from tests.support.wait import wait_until

CLIENTS = 200
SECONDS = float(os.environ.get("XLA_CACHE_TEST_LOAD_SECONDS", "15"))
WARMUP = min(10.0, SECONDS / 3)  # seconds of load before the memory samples count
SEEDED = 200
NS, UPLOADS = "load", "load-uploads"
# What a client does next, and how often (weights): jobs mostly read; about 20 uploads in flight at a time.
MIX = {"get": 45, "head": 15, "put": 10, "missing": 10, "manifest": 10, "get_missing": 10}


@dataclass
class Results:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    rss: list[tuple[float, int]] = field(default_factory=list)  # (seconds into the load, bytes)


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU time of the processes, in seconds."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of the line)
    return total / os.sysconf("SC_CLK_TCK")


async def one_client(
    number: int, server: LiveServer, entries: dict[str, bytes], deadline: float, results: Results
) -> None:
    rng = random.Random(number)
    keys = list(entries)
    ops, weights = list(MIX), list(MIX.values())
    host, port = server.url.removeprefix("http://").split(":")
    async with Http1Connection(host, int(port)) as http:
        count = 0
        while time.monotonic() < deadline:
            op = rng.choices(ops, weights)[0]
            count += 1
            method, path, headers, body, expected = request_for(op, rng, keys, f"c{number}-{count}")
            started = time.perf_counter()
            try:
                status, answer, content = await http.request(method, path, headers, body)
            except (Http1Error, OSError) as exc:
                results.errors.append(f"{op}: {type(exc).__name__}: {exc}")
                return
            results.latencies[op].append(time.perf_counter() - started)
            results.statuses[(op, status)] += 1
            if status not in expected:
                results.errors.append(f"{op}: {status} {content[:200]!r}")
            elif op == "get" and sha(content) != answer[SHA256_HEADER.lower()]:
                results.errors.append("get: the bytes do not match their digest")


def request_for(
    op: str, rng: random.Random, keys: list[str], fresh: str
) -> tuple[str, str, dict[str, str], bytes, set[int]]:
    """The request for ``op`` (method, path, headers, body), and the statuses it may answer."""
    key = rng.choice(keys)
    if op == "get":
        return "GET", f"/v1/namespaces/{NS}/entries/{key}", {}, b"", {200}
    if op == "head":
        return "HEAD", f"/v1/namespaces/{NS}/entries/{key}", {}, b"", {200}
    if op == "put":
        data = rng.randbytes(rng.randint(1024, 64 * 1024))
        path = f"/v1/namespaces/{UPLOADS}/entries/{fresh}"
        return "PUT", path, {SHA256_HEADER: sha(data)}, data, {201}
    if op == "missing":
        asked = rng.sample(keys, 40) + [f"absent-{fresh}-{i}" for i in range(10)]
        body = json.dumps({"keys": asked}).encode()
        return "POST", f"/v1/namespaces/{NS}/missing", {"Content-Type": "application/json"}, body, {200}
    if op == "manifest":
        return "GET", f"/v1/namespaces/{NS}/manifest", {}, b"", {200}
    assert op == "get_missing"
    return "GET", f"/v1/namespaces/{NS}/entries/absent-{fresh}", {}, b"", {404}


async def sample_rss(server: LiveServer, started: float, deadline: float, results: Results) -> None:
    while time.monotonic() < deadline:
        results.rss.append((time.monotonic() - started, rss_bytes(tree(server.pid))))
        await asyncio.sleep(1.0)  # a sampling period, not a wait for anything


async def load(server: LiveServer, entries: dict[str, bytes], results: Results) -> None:
    started = time.monotonic()
    deadline = started + SECONDS
    await asyncio.gather(
        sample_rss(server, started, deadline, results),
        *(one_client(i, server, entries, deadline, results) for i in range(CLIENTS)),
    )


def seed(url: str) -> dict[str, bytes]:
    rng = random.Random(0)
    entries = {f"e{i:04d}": rng.randbytes(rng.randint(4 * 1024, 128 * 1024)) for i in range(SEEDED)}
    with httpx.Client(base_url=url, timeout=60) as client:
        for key, data in entries.items():
            url_ = f"/v1/namespaces/{NS}/entries/{key}"
            assert client.put(url_, content=data, headers={SHA256_HEADER: sha(data)}).status_code == 201
    return entries


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("deployment", ["postgresql-local"], indirect=True)
def test_200_clients_under_load(deployment: Deployment, tmp_path: Path, server_env: dict[str, str]) -> None:
    upgrade(deployment.settings(tmp_path / "migrate"))
    # Saturated, a PUT waits for one of its worker's upload slots (docs/reference/settings.md); on this kind
    # of machine its p99 was 9.2 s, and 14.6 s on one 1.7x slower, past the default 10 s after which the
    # server answers 503 (backpressure, not a failure). The test gives uploads 30 s, so that what it
    # counts as errors stays failures.
    env = deployment.env(**server_env, XLA_CACHE_UPLOAD_WAIT_SECONDS="30")
    with run_server(tmp_path / "server", env, workers=2) as server:
        wait_until(
            lambda: server.log().count("Application startup complete.") >= 2,
            timeout=60,
            message=server.log,
        )
        entries = seed(server.url)
        processes = tree(server.pid)
        server_cpu, client_cpu = cpu_seconds(processes), time.process_time()
        results = Results()
        wall = time.monotonic()
        asyncio.run(load(server, entries, results))
        wall = time.monotonic() - wall
        server_cpu, client_cpu = cpu_seconds(processes) - server_cpu, time.process_time() - client_cpu
        log = server.log()

    requests = sum(results.statuses.values())
    everything = [value for values in results.latencies.values() for value in values]
    by_op = {
        op: f"p50 {percentile(v, 0.5) * 1000:.0f} ms, p99 {percentile(v, 0.99) * 1000:.0f} ms"
        for op, v in results.latencies.items()
    }
    samples = [rss for at, rss in results.rss if at >= WARMUP]
    third = max(1, len(samples) // 3)
    first, last = statistics.mean(samples[:third]), statistics.mean(samples[-third:])
    print(
        f"\nload: {CLIENTS} clients for {wall:.0f} s against 2 workers on PostgreSQL: {requests} requests "
        f"({requests / wall:.0f}/s), {len(results.errors)} errors; latency p50 "
        f"{percentile(everything, 0.5) * 1000:.0f} ms, p99 {percentile(everything, 0.99) * 1000:.0f} ms; "
        f"{by_op}; server RSS (supervisor and workers) {first / MIB:.0f} MiB in the first third after "
        f"warm-up, {last / MIB:.0f} MiB in the last (peak {max(samples) / MIB:.0f} MiB); CPU: server "
        f"{server_cpu:.0f} s, clients {client_cpu:.0f} s, of {2 * wall:.0f} s on 2 cores; statuses "
        f"{dict(sorted(results.statuses.items()))}"
    )
    assert results.errors == [], results.errors[:20]
    assert set(MIX) == set(results.latencies)
    assert requests > CLIENTS * 10, "the load never got going"
    grew = f"server memory grew from {first / MIB:.0f} to {last / MIB:.0f} MiB"
    assert last <= first * 1.2 + 16 * MIB, grew
    assert "Traceback" not in log and "unhandled error" not in log
