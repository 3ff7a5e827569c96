"""Two ``xla-cache-server serve`` replicas sharing one PostgreSQL index and one blob store (a bucket on the
GCS emulator, or one local directory), as behind a load balancer."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from threading import Barrier
from typing import Any

import httpx
import pytest

from cache_protocol import SHA256_HEADER
from cache_server.storage import open_store
from tests.support.api import put_at, sha
from tests.support.deployment import Deployment
from tests.support.server import LiveServer, run_server
from tests.support.wait import wait_until

NS = "replicated"
FINGERPRINT = {"framework": "torch_xla", "torch_xla": "2.7.0", "device_type": "TPU", "devices": 8}


@pytest.fixture
def replicas(deployment: Deployment, tmp_path: Path) -> Iterator[tuple[LiveServer, LiveServer]]:
    # `serve` only migrates an embedded SQLite file; a shared database is migrated once, beforehand.
    migrated = deployment.cli(tmp_path / "migrate", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    with ExitStack() as stack:
        a, b = (
            stack.enter_context(
                run_server(tmp_path / name, deployment.env(XLA_CACHE_ACCESS_FLUSH_SECONDS="0.3"))
            )
            for name in ("replica-a", "replica-b")
        )
        yield a, b


def namespace(server: LiveServer) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/namespaces/{NS}", timeout=10)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def settled(servers: tuple[LiveServer, ...], hits: int, misses: int) -> list[dict[str, Any]]:
    """Each replica's view of the namespace once the batched counters have been flushed."""
    views: list[dict[str, Any]] = []

    def views_once_flushed() -> list[dict[str, Any]] | None:
        views[:] = [namespace(server) for server in servers]
        return list(views) if all((v["hits"], v["misses"]) == (hits, misses) for v in views) else None

    return wait_until(
        views_once_flushed,
        timeout=20,
        interval=0.1,
        message=lambda: f"the replicas did not all count {hits} hits and {misses} misses: {views}",
    )


@pytest.mark.parametrize("deployment", ["postgresql-local", "postgresql-gcs"], indirect=True)
def test_two_replicas_share_one_cache(
    deployment: Deployment, replicas: tuple[LiveServer, LiveServer]
) -> None:
    a, b = replicas
    assert httpx.put(f"{a.url}/v1/namespaces/{NS}", json={"fingerprint": FINGERPRINT}).status_code == 201
    assert httpx.get(f"{b.url}/v1/namespaces/{NS}").json()["fingerprint"] == FINGERPRINT

    # Uploaded through one, served by the other.
    first = os.urandom(200_000)
    assert put_at(a.url, NS, "1000", first).status_code == 201
    got = httpx.get(f"{b.url}/v1/namespaces/{NS}/entries/1000")
    assert got.status_code == 200 and got.content == first
    assert got.headers[SHA256_HEADER] == sha(first)
    manifest = httpx.get(f"{b.url}/v1/namespaces/{NS}/manifest").json()
    assert manifest["entries"] == [
        {
            "key": "1000",
            "size": len(first),
            "sha256": sha(first),
            "pack": None,
            "signature": None,
            "prefilled": None,
        }
    ]

    # The same new keys uploaded through both at once: one blob and one row each, one "created" each.
    blobs = {f"{2000 + i}": os.urandom(600_000 + i) for i in range(6)}
    jobs = [(server, key) for key in blobs for server in (a, b, a, b)]
    barrier = Barrier(len(jobs))

    def racing_put(job: tuple[LiveServer, str]) -> int:
        barrier.wait()
        return put_at(job[0].url, NS, job[1], blobs[job[1]]).status_code

    with ThreadPoolExecutor(len(jobs)) as pool:
        statuses = list(pool.map(racing_put, jobs))
    for i, key in enumerate(blobs):
        assert sorted(statuses[4 * i : 4 * i + 4]) == [200, 200, 200, 201], key
    store = open_store(deployment.storage_url)
    try:
        assert sorted(info.name for info in store.list(f"{NS}/")) == sorted(
            f"{NS}/{k}" for k in ["1000", *blobs]
        )
    finally:
        store.close()
    for server in (a, b):
        for key, data in blobs.items():
            assert httpx.get(f"{server.url}/v1/namespaces/{NS}/entries/{key}").content == data

    # Hits, misses and sizes agree whichever replica answers once each has flushed its batch.
    for server, key in [(a, "1000"), (b, "1000"), (b, "2000"), (a, "nope"), (b, "nope"), (b, "gone")]:
        httpx.get(f"{server.url}/v1/namespaces/{NS}/entries/{key}")
    bundle = httpx.post(f"{a.url}/v1/namespaces/{NS}/bundle", json={"keys": ["2001", "missing"]})
    assert bundle.status_code == 200
    hits = (
        1 + 2 * len(blobs) + 3 + 1
    )  # reads above: the cross-replica GET, every racing key on both, then 3, then 1
    view_a, view_b = settled((a, b), hits=hits, misses=4)
    assert view_a == view_b
    assert (view_a["hits"], view_a["misses"]) == (hits, 4)
    assert (view_a["entries"], view_a["bytes"], view_a["uploads"]) == (
        1 + len(blobs),
        len(first) + sum(len(d) for d in blobs.values()),
        1 + len(blobs),
    )
    stats = [httpx.get(f"{server.url}/admin/stats").json() for server in (a, b)]
    for report in stats:
        del report["generated_at"]
    assert stats[0] == stats[1]
    totals = stats[0]["totals"]
    assert (totals["entries"], totals["hits"], totals["misses"], totals["uploads"]) == (
        1 + len(blobs),
        hits,
        4,
        1 + len(blobs),
    )
