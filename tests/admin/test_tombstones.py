"""Every way an entry leaves the cache writes its tombstone with the policy that removed it: budget (lru) and
age (max_age) eviction, an explicit delete (admin), a namespace deleted, a token purged, damaged bytes, a
lost blob; and a later compile of the key is explained as evicted."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from cache_server.app import create_app
from cache_server.auth.tokens import Role
from cache_server.index.tombstones import tombstones_of
from cache_server.settings import Settings
from cache_server.wiring import Services, build_services
from tests.support.api import bearer, entry_url, put_ok
from tests.support.apps import services_of
from tests.support.clock import ShiftedClock
from tests.support.migrated import migrated
from tests.support.wait import wait_until


def policies(services: Services, namespace: str, keys: list[str]) -> dict[str, str]:
    return {key: stone.policy for key, stone in tombstones_of(services.database, namespace, keys).items()}


def test_each_removal_path_writes_its_policy(
    client: TestClient, services: Services, settings: Settings
) -> None:
    for key in ("old", "big", "deleted", "damaged", "lost", "kept"):
        put_ok(client, "ns", key, key.encode() * 50)
    for key in ("a", "b"):
        put_ok(client, "doomed", key, b"x" * 10)

    assert client.delete(entry_url("ns", "deleted")).status_code == 204
    # the blob file overwritten: gc finds it damaged, sets it aside and drops its row
    blob = settings.data_dir / "blobs" / "ns" / "damaged"
    blob.write_bytes(b"Z" * len(blob.read_bytes()))
    (settings.data_dir / "blobs" / "ns" / "lost").unlink()
    swept = client.post("/admin/gc", json={"grace_seconds": 0}).json()
    assert (swept["rows_dropped"], swept["damaged_blobs"]) == (1, 1)
    assert client.delete("/admin/namespaces/doomed").status_code == 200
    # left: old (150 bytes), big (150), kept (200), least recently used first; the budget takes "old"
    budget = client.post("/admin/evict", json={"max_total_bytes": 350}).json()
    assert budget["evicted"] == 1, budget
    older = client.post("/admin/evict", json={"older_than_seconds": 0, "namespace": "ns"}).json()
    assert older["evicted"] == 2, older

    assert policies(services, "ns", ["old", "big", "deleted", "damaged", "lost", "kept"]) == {
        "old": "lru",
        "big": "max_age",
        "kept": "max_age",
        "deleted": "admin",
        "damaged": "damaged",
        "lost": "lost",
    }
    assert policies(services, "doomed", ["a", "b"]) == {"a": "namespace_deleted", "b": "namespace_deleted"}


def test_a_purged_token_leaves_purge_tombstones(auth_client: TestClient, tokens: dict[str, str]) -> None:
    services = services_of(auth_client)
    leaked, _ = services.tokens.create("leaked", Role.WRITE)
    put_ok(auth_client, "ns", "by-leaked", b"bytes", **bearer(leaked))
    response = auth_client.post("/admin/tokens/leaked/purge", headers=bearer(tokens["admin"]))
    assert response.status_code == 200, response.text
    assert policies(services, "ns", ["by-leaked"]) == {"by-leaked": "purge"}


def test_a_recompile_after_budget_eviction_is_explained(client: TestClient, services: Services) -> None:
    put_ok(client, "ns", "evicted-key", b"y" * 100)
    assert client.post("/admin/evict", json={"max_total_bytes": 0}).json()["evicted"] == 1
    body = {
        "run_id": "run-after-evict",
        "namespace": "ns",
        "framework": "torch_xla",
        "host": "h",
        "started_at": time.time(),
        "misses": 1,
        "new_misses": [{"key": "evicted-key"}],
    }
    assert client.post("/v1/runs", json=body).status_code == 200
    (only,) = client.get("/admin/runs/run-after-evict").json()["misses"]
    assert (only["reason"], only["policy"]) == ("evicted", "lru")
    assert only["detail"].endswith("by policy lru")


def test_background_gc_prunes_runs_beyond_the_bound(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data", access_flush_seconds=60.0, max_runs=2, gc_interval_seconds=0.2
    )
    migrated(settings)
    clock = ShiftedClock()
    with TestClient(create_app(settings, build_services(settings, clock=clock))) as client:
        for index in range(4):
            body = {
                "run_id": f"run-pruned-{index:04d}",
                "namespace": "ns",
                "framework": "jax",
                "host": "h",
                "started_at": time.time() - 100 + index,
            }
            assert client.post("/v1/runs", json=body).status_code == 200
            clock.advance(1)  # reported a second after the one before: the oldest reports go first

        def kept() -> list[str]:
            return sorted(r["run_id"] for r in client.get("/admin/runs").json()["runs"])

        wait_until(lambda: len(kept()) <= 2, timeout=30, interval=0.1, message="no gc round pruned the runs")
        assert kept() == ["run-pruned-0002", "run-pruned-0003"]
