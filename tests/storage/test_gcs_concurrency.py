"""The GCS store under the load of several bundles at once, against the emulator 20 ms away (a latency
proxy): every read finds a pooled connection (a connection the pool must drop is a new one later, and
each costs a round trip to GCS), and each small blob costs one request."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import pytest

from cache_server.storage.gcs import GcsBlobStore
from cache_server.storage.reading import open_many
from tests.support.gcs_emulator import fake_gcs_endpoint, gcs_bucket  # noqa: F401 - fixtures
from tests.support.tcp_proxy import TcpProxy, tcp_proxy

BUNDLES = 4  # a client's bundle streams at once


def test_concurrent_bundles_keep_their_connections(
    fake_gcs_endpoint: str,  # noqa: F811
    gcs_bucket: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    host, port = fake_gcs_endpoint.removeprefix("http://").rsplit(":", 1)
    with tcp_proxy(host, int(port), delay=0.02) as proxy:
        store = GcsBlobStore(
            gcs_bucket, "conc", endpoint=f"http://{host}:{proxy.port}", retries=1, backoff=0.05
        )
        try:
            _read_in_bundles(store, proxy, caplog)
        finally:
            store.close()


def _read_in_bundles(store: GcsBlobStore, proxy: TcpProxy, caplog: pytest.LogCaptureFixture) -> None:
    count = 2 * store.read_ahead
    names = [f"ns/k{i}" for i in range(count)]
    with ThreadPoolExecutor(32) as pool:
        assert all(pool.map(lambda n: store.put(n, [n.encode() * 100], {}), names))
    before = proxy.requests

    def bundle(_: int) -> int:
        total = 0
        for reader in open_many(store, [(n, 600) for n in names], read_ahead=store.read_ahead):
            assert reader is not None
            with reader:
                total += sum(len(c) for c in reader.chunks())
        return total

    with (
        caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"),
        ThreadPoolExecutor(BUNDLES) as pool,
    ):
        totals = list(pool.map(bundle, range(BUNDLES)))
    assert totals == [sum(len(n) * 100 for n in names)] * BUNDLES
    assert [r.getMessage() for r in caplog.records if "pool is full" in r.getMessage()] == []
    assert proxy.requests - before == BUNDLES * count
