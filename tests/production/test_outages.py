"""A real server while PostgreSQL or the bucket is unreachable: ``/readyz`` and the API answer 503 with a
JSON sentence (never a traceback), and everything comes back by itself when the service returns.

The outage is made by a TCP proxy between the server and the service (the machine's PostgreSQL and the
emulator are shared with other tests): ``refuse`` is a stopped service, ``blackhole`` a host that vanished.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.support.deployment import Deployment
from tests.support.outages import DATA, ENTRY, OTHER, assert_unavailable, put_both, put_new, wait_ready
from tests.support.server import LiveServer, run_server
from tests.support.tcp_proxy import TcpProxy, tcp_proxy
from tests.support.wait import wait_until


@pytest.fixture
def postgres_behind_proxy(
    deployment: Deployment, tmp_path: Path
) -> Iterator[tuple[httpx.Client, LiveServer, TcpProxy]]:
    """A server with auth on, whose PostgreSQL is reached through a proxy: every request needs the index."""
    migrated = deployment.cli(tmp_path / "migrate", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    created = deployment.cli(tmp_path / "migrate", "token", "create", "--name", "ci", "--role", "write")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    url = make_url(deployment.database_url)
    with tcp_proxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        env = deployment.env(
            XLA_CACHE_DATABASE_URL=proxied, XLA_CACHE_DB_CONNECT_TIMEOUT="2", XLA_CACHE_AUTH="on"
        )
        with (
            run_server(tmp_path / "server", env) as server,
            httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
            ) as api,
        ):
            yield api, server, proxy


@pytest.mark.parametrize("deployment", ["postgresql-local"], indirect=True)
def test_postgresql_outage(postgres_behind_proxy: tuple[httpx.Client, LiveServer, TcpProxy]) -> None:
    api, server, proxy = postgres_behind_proxy
    put_both(api)

    for outage in (proxy.refuse, proxy.blackhole):
        outage()
        ready = api.get("/readyz")
        assert_unavailable(ready, "index_unavailable")
        assert "index database cannot be reached" in ready.json()["detail"]
        assert_unavailable(api.get(ENTRY), "index_unavailable")  # the token check needs the index too
        assert_unavailable(put_new(api, "5678"), "index_unavailable")
        assert_unavailable(api.get("/v1/namespaces/ns/manifest"), "index_unavailable")
        assert_unavailable(api.post("/v1/namespaces/ns/missing", json={"keys": ["1"]}), "index_unavailable")
        assert api.get("/healthz").status_code == 200  # alive, only not ready

        proxy.forward()
        wait_ready(api)
        assert api.get(OTHER).content == DATA
        assert api.get("/v1/namespaces/ns").json()["entries"] >= 1

    assert put_new(api, "5678").status_code == 201
    assert httpx.get(f"{server.url}{ENTRY}").status_code == 401  # auth was on all along

    # The hits of the reads between the outages were kept through failed flushes, not lost.
    def hits() -> int:
        return int(api.get("/v1/namespaces/ns").json()["hits"])

    wait_until(lambda: hits() == 2, timeout=20, interval=0.1, message=lambda: f"{hits()} hits counted, not 2")
    assert "unhandled error" not in server.log()


@pytest.fixture
def bucket_behind_proxy(
    deployment: Deployment, tmp_path: Path
) -> Iterator[tuple[httpx.Client, LiveServer, TcpProxy]]:
    emulator = urlparse(deployment.extra_env["STORAGE_EMULATOR_HOST"])
    with tcp_proxy(emulator.hostname or "127.0.0.1", emulator.port or 80) as proxy:
        env = deployment.env(
            STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{proxy.port}",
            XLA_CACHE_STORAGE_TIMEOUT="2",
            XLA_CACHE_STORAGE_RETRIES="1",
        )
        with (
            run_server(tmp_path / "server", env) as server,
            httpx.Client(base_url=server.url, timeout=60) as api,
        ):
            yield api, server, proxy


@pytest.mark.parametrize("deployment", ["sqlite-gcs"], indirect=True)
def test_storage_outage(bucket_behind_proxy: tuple[httpx.Client, LiveServer, TcpProxy]) -> None:
    api, server, proxy = bucket_behind_proxy
    put_both(api)

    for outage in (proxy.refuse, proxy.blackhole):
        outage()
        ready = api.get("/readyz")
        assert_unavailable(ready, "storage_unavailable")
        assert "Google Cloud Storage" in ready.json()["detail"]
        assert_unavailable(api.get(ENTRY), "storage_unavailable")
        assert_unavailable(put_new(api, "5678"), "storage_unavailable")
        assert api.get("/healthz").status_code == 200

        proxy.forward()
        wait_ready(api)
        assert api.get(OTHER).content == DATA

    assert api.get(ENTRY).content == DATA
    assert put_new(api, "5678").status_code == 201
    assert "unhandled error" not in server.log()
