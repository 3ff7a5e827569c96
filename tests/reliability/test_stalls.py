"""The index database or the bucket stops answering but keeps its connections open (a frozen process, a
stalled network path): every request that needs it gets a 503 with JSON and ``Retry-After`` within the
configured bound, ``/healthz`` answers at once all along, and the server recovers by itself.

``tests/production/test_outages.py`` covers the same services refused (down) and black-holed (a host
that vanished); here the TCP proxy holds every connection open and passes nothing (``TcpProxy.stall``).
A SQLite index is a file in the server's own process: it cannot stall this way, so the database case runs
on PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from sqlalchemy.engine import make_url

from cache_server.index.migrate import upgrade
from tests.support.deployment import Deployment
from tests.support.outages import (
    DATA,
    ENTRY,
    OTHER,
    assert_unavailable,
    put_both,
    put_new,
    wait_ready,
)
from tests.support.server import LiveServer, run_server
from tests.support.tcp_proxy import TcpProxy, tcp_proxy

STATEMENT_TIMEOUT = 2.0  # XLA_CACHE_DB_STATEMENT_TIMEOUT
CONNECT_TIMEOUT = 2.0  # XLA_CACHE_DB_CONNECT_TIMEOUT
STORAGE_TIMEOUT = 2.0  # XLA_CACHE_STORAGE_TIMEOUT
STORAGE_RETRIES = 1  # XLA_CACHE_STORAGE_RETRIES
SLACK = 3.0  # a loaded 2-core machine, the watchdog's own period, the retry's jitter
HEALTHZ_BOUND = 1.0
CONCURRENT = 12  # requests stuck at once: more than one worker's share of database connections
HOT_SECONDS = 60.0  # XLA_CACHE_HOT_CACHE_SECONDS of the PostgreSQL case: what was read stays in memory


@dataclass
class Timed:
    response: httpx.Response
    seconds: float


def timed(call: Callable[[], httpx.Response]) -> Timed:
    started = time.monotonic()
    response = call()
    return Timed(response, time.monotonic() - started)


@dataclass
class StallRun:
    """What the requests made during a stall got, and how fast ``/healthz`` answered meanwhile."""

    answers: dict[str, list[Timed]]
    healthz: list[float]


def during_stall(api: httpx.Client, requests: dict[str, Callable[[], httpx.Response]]) -> StallRun:
    """Send ``CONCURRENT`` of the requests at once (round robin), and poll ``/healthz`` until all are back."""
    names = list(requests)
    healthz: list[float] = []
    with ThreadPoolExecutor(CONCURRENT) as pool:
        futures: list[tuple[str, Future[Timed]]] = [
            (names[i % len(names)], pool.submit(timed, requests[names[i % len(names)]]))
            for i in range(CONCURRENT)
        ]
        pending = {future for _, future in futures}
        while pending:
            health = timed(lambda: api.get("/healthz", timeout=HEALTHZ_BOUND * 5))
            assert health.response.status_code == 200
            healthz.append(health.seconds)
            pending = wait(pending, timeout=0.05).not_done  # a /healthz every 50 ms until all are back
        answers: dict[str, list[Timed]] = {}
        for name, future in futures:
            answers.setdefault(name, []).append(future.result())
    return StallRun(answers, healthz)


def report(title: str, run: StallRun, bound: float) -> None:
    slowest = {name: round(max(t.seconds for t in got), 2) for name, got in run.answers.items()}
    print(
        f"\n{title}: {CONCURRENT} requests, all 503 within {bound:g} s; slowest by route {slowest}; "
        f"/healthz answered {len(run.healthz)} times meanwhile, slowest {max(run.healthz):.3f} s"
    )


@pytest.fixture
def postgres_stalls(
    deployment: Deployment, tmp_path: Path, server_env: dict[str, str]
) -> Iterator[tuple[httpx.Client, LiveServer, TcpProxy]]:
    upgrade(deployment.settings(tmp_path / "migrate"))  # what `xla-cache-server migrate` does
    url = make_url(deployment.database_url)
    with tcp_proxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        env = deployment.env(
            XLA_CACHE_DATABASE_URL=proxied,
            XLA_CACHE_DB_STATEMENT_TIMEOUT=str(STATEMENT_TIMEOUT),
            XLA_CACHE_DB_CONNECT_TIMEOUT=str(CONNECT_TIMEOUT),
            XLA_CACHE_HOT_CACHE_SECONDS=str(HOT_SECONDS),
            **server_env,
        )
        with (
            run_server(tmp_path / "server", env) as server,
            httpx.Client(base_url=server.url, timeout=60) as api,
        ):
            yield api, server, proxy


@pytest.mark.timeout(120)
@pytest.mark.parametrize("deployment", ["postgresql-local"], indirect=True)
def test_stalled_database_is_503_within_the_statement_timeout(
    postgres_stalls: tuple[httpx.Client, LiveServer, TcpProxy],
) -> None:
    api, server, proxy = postgres_stalls
    put_both(api)
    # A database call is cut after the statement timeout; a new connection gives up after the connect one.
    bound = STATEMENT_TIMEOUT + CONNECT_TIMEOUT + SLACK
    for stall in range(2):  # the second stall meets the connections made after the first one
        assert api.get(OTHER).content == DATA
        proxy.stall()
        # An entry read a moment ago is answered from the server's memory: the stalled index is not asked.
        hot = api.get(OTHER, timeout=bound)
        assert hot.status_code == 200 and hot.content == DATA
        run = during_stall(
            api,
            {
                "GET entry": lambda: api.get(ENTRY),
                "PUT entry": lambda: put_new(api, f"stalled-{time.monotonic_ns()}"),
                "manifest": lambda: api.get("/v1/namespaces/ns/manifest"),
                "missing": lambda: api.post("/v1/namespaces/ns/missing", json={"keys": ["1"]}),
                "readyz": lambda: api.get("/readyz"),
            },
        )
        for got in run.answers.values():
            for answer in got:
                assert_unavailable(answer.response, "index_unavailable")
                assert answer.seconds < bound, f"{answer.seconds:.1f} s: {answer.response.text}"
        assert max(run.healthz) < HEALTHZ_BOUND, run.healthz
        report(f"PostgreSQL stalled ({stall + 1})", run, bound)

        proxy.forward()
        wait_ready(api)
        assert put_new(api, f"after-{stall}").status_code == 201
    assert api.get(ENTRY).content == DATA
    assert "unhandled error" not in server.log()
    assert "Traceback" not in server.log()


@pytest.fixture
def bucket_stalls(
    deployment: Deployment, tmp_path: Path, server_env: dict[str, str]
) -> Iterator[tuple[httpx.Client, LiveServer, TcpProxy]]:
    emulator = urlparse(deployment.extra_env["STORAGE_EMULATOR_HOST"])
    with tcp_proxy(emulator.hostname or "127.0.0.1", emulator.port or 80) as proxy:
        env = deployment.env(
            STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{proxy.port}",
            XLA_CACHE_STORAGE_TIMEOUT=str(STORAGE_TIMEOUT),
            XLA_CACHE_STORAGE_RETRIES=str(STORAGE_RETRIES),
            **server_env,
        )
        with (
            run_server(tmp_path / "server", env) as server,
            httpx.Client(base_url=server.url, timeout=60) as api,
        ):
            yield api, server, proxy


@pytest.mark.timeout(120)
@pytest.mark.parametrize("deployment", ["sqlite-gcs"], indirect=True)
def test_stalled_bucket_is_503_within_the_storage_timeout(
    bucket_stalls: tuple[httpx.Client, LiveServer, TcpProxy],
) -> None:
    api, server, proxy = bucket_stalls
    put_both(api)
    # Each storage call: its first try and its retries, each cut after the timeout, with backoff between.
    bound = (STORAGE_RETRIES + 1) * STORAGE_TIMEOUT + SLACK
    proxy.stall()
    run = during_stall(
        api,
        {
            "GET entry": lambda: api.get(ENTRY),
            "PUT entry": lambda: put_new(api, f"stalled-{time.monotonic_ns()}"),
            "readyz": lambda: api.get("/readyz"),
        },
    )
    for got in run.answers.values():
        for answer in got:
            assert_unavailable(answer.response, "storage_unavailable")
            assert answer.seconds < bound, f"{answer.seconds:.1f} s: {answer.response.text}"
    assert max(run.healthz) < HEALTHZ_BOUND, run.healthz
    # What needs only the index goes on.
    manifest = api.get("/v1/namespaces/ns/manifest").json()["entries"]
    assert {entry["key"] for entry in manifest} == {"1234", "4321"}
    report("bucket stalled", run, bound)

    proxy.forward()
    wait_ready(api)
    assert api.get(ENTRY).content == DATA
    assert put_new(api, "after").status_code == 201
    assert api.get("/v1/namespaces/ns/entries/after").status_code == 200
    assert "unhandled error" not in server.log()
