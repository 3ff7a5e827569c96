"""POST /admin/evict and background eviction: what remains is what was used most recently."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from cache_server.app import create_app
from cache_server.errors import StorageUnavailable
from cache_server.settings import Settings
from cache_server.wiring import Services
from tests.support.api import put_ok, sha
from tests.support.apps import services_of
from tests.support.clock import ShiftedClock
from tests.support.wait import wait_until

KIB = 1024


@pytest.fixture
def clock() -> ShiftedClock:
    """The services' clock: tests age entries by moving it, not by sleeping."""
    return ShiftedClock()


def blob_files(settings: Settings, namespace: str) -> set[str]:
    folder = settings.data_dir / "blobs" / namespace
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def stored_keys(client: TestClient, namespace: str) -> set[str]:
    listed = client.get(f"/v1/namespaces/{namespace}/manifest").json()["entries"]
    return {entry["key"] for entry in listed}


def fill(client: TestClient, namespace: str, count: int, size: int = KIB) -> list[str]:
    """Upload ``count`` entries, oldest first, each accessed once in that order (distinct access times)."""
    keys = [f"k{i:03d}" for i in range(count)]
    for key in keys:
        put_ok(client, namespace, key, key.encode().ljust(size, b"."))
    return keys


def use(client: TestClient, namespace: str, keys: list[str]) -> None:
    for key in keys:
        assert client.get(f"/v1/namespaces/{namespace}/entries/{key}").status_code == 200


def test_fill_past_budget_keeps_the_most_recently_used(client: TestClient, settings: Settings) -> None:
    keys = fill(client, "ns", 20)  # 20 KiB
    recent = [keys[0], keys[3], keys[7]]  # old uploads, used just now: they must stay
    use(client, "ns", recent)
    response = client.post("/admin/evict", json={"max_total_bytes": 8 * KIB})
    assert response.status_code == 200
    body = response.json()
    assert body["evicted"] == 12 and body["freed_bytes"] == 12 * KIB and body["dry_run"] is False
    survivors = set(recent) | set(keys[-5:])  # the 3 just used and the 5 uploaded last
    assert stored_keys(client, "ns") == survivors
    assert blob_files(settings, "ns") == survivors  # the blobs went too
    totals = client.get("/admin/stats").json()["totals"]
    assert (totals["entries"], totals["bytes"], totals["evictions"]) == (8, 8 * KIB, 12)


def test_dry_run_lists_least_recently_used_first_and_removes_nothing(
    client: TestClient, settings: Settings
) -> None:
    keys = fill(client, "ns", 10)
    use(client, "ns", [keys[0]])
    body = client.post("/admin/evict", json={"max_total_bytes": 6 * KIB, "dry_run": True}).json()
    assert body["dry_run"] is True and body["evicted"] == 4 and body["freed_bytes"] == 4 * KIB
    assert [k["key"] for k in body["keys"]] == keys[1:5]
    assert body["keys_truncated"] is False
    assert stored_keys(client, "ns") == set(keys) and blob_files(settings, "ns") == set(keys)
    short = client.post("/admin/evict", json={"max_total_bytes": 0, "dry_run": True, "list_limit": 3}).json()
    assert short["evicted"] == 10 and len(short["keys"]) == 3 and short["keys_truncated"] is True


def test_older_than_and_namespace_scope(client: TestClient, clock: ShiftedClock) -> None:
    fill(client, "a", 3)
    fill(client, "b", 3)
    clock.advance(7200)  # two hours later
    put_ok(client, "a", "fresh", b"new")
    body = client.post("/admin/evict", json={"older_than_seconds": 3600, "namespace": "a"}).json()
    assert body["evicted"] == 3
    assert stored_keys(client, "a") == {"fresh"}
    assert len(stored_keys(client, "b")) == 3  # other namespaces untouched
    everything_old = client.post("/admin/evict", json={"older_than_seconds": 3600}).json()
    assert everything_old["evicted"] == 3 and stored_keys(client, "b") == set()


def test_namespace_budget_counts_only_that_namespace(client: TestClient) -> None:
    a = fill(client, "a", 6)
    fill(client, "b", 6)
    body = client.post("/admin/evict", json={"max_total_bytes": 2 * KIB, "namespace": "a"}).json()
    assert body["evicted"] == 4
    assert stored_keys(client, "a") == set(a[-2:]) and len(stored_keys(client, "b")) == 6


def test_without_criteria_or_budgets_it_says_what_is_missing(client: TestClient) -> None:
    response = client.post("/admin/evict", json={})
    assert response.status_code == 400
    assert "XLA_CACHE_MAX_TOTAL_BYTES" in response.json()["detail"]
    assert client.post("/admin/evict", json={"max_total_bytes": -1}).status_code == 400


def test_background_eviction_keeps_store_and_namespaces_within_budget(
    client: TestClient, settings: Settings
) -> None:
    per_namespace = {ns: fill(client, ns, 6) for ns in ("a", "b", "c", "d")}  # 24 KiB, 6 per namespace
    use(client, "a", [per_namespace["a"][0]])  # the oldest of a, used last of all
    services_of(client).access.flush()  # access times reach the index in batches (another process here)
    budgets = settings.model_copy(
        update={"max_total_bytes": 10 * KIB, "max_namespace_bytes": 4 * KIB, "eviction_interval_seconds": 0.2}
    )
    with TestClient(create_app(budgets)) as budgeted:

        def within() -> bool:
            stored = services_of(budgeted).admin.stored_by_namespace().values()
            return sum(b for _, b in stored) <= 10 * KIB and all(b <= 4 * KIB for _, b in stored)

        wait_until(within, timeout=20, message="background eviction did not get within the budgets")
        remaining = {ns: stored_keys(budgeted, ns) for ns in per_namespace}
        again = budgeted.post("/admin/evict", json={"dry_run": True}).json()
    a, b, c, d = (per_namespace[ns] for ns in "abcd")
    # Each namespace loses its least recently used down to 4 KiB (a: a1, a2; the others their first two),
    # then the store loses the least recently used of what is left down to 10 KiB: a3..a5, b2..b4.
    assert remaining == {"a": {a[0]}, "b": {b[5]}, "c": set(c[2:]), "d": set(d[2:])}
    assert again["evicted"] == 0  # an empty request applies the same budgets: nothing left to do


def test_delete_namespace_removes_rows_blobs_and_row(client: TestClient, settings: Settings) -> None:
    fill(client, "gone", 5)
    fill(client, "kept", 2)
    response = client.delete("/admin/namespaces/gone")
    assert response.status_code == 200
    assert response.json() == {
        "namespace": "gone",
        "deleted_entries": 5,
        "freed_bytes": 5 * KIB,
        "remaining": 0,
    }
    assert client.get("/v1/namespaces/gone").status_code == 404
    assert blob_files(settings, "gone") == set() and len(stored_keys(client, "kept")) == 2
    assert client.delete("/admin/namespaces/gone").status_code == 404


def test_rows_go_before_blobs(
    services: Services, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If deleting a blob fails, the row is already gone: never a row without its blob."""
    keys = ["k0", "k1", "k2"]
    for key in keys:
        services.cache.put_entry("ns", key, [b"x" * 10], sha256=sha(b"x" * 10))
    seen_rows_at_delete: list[bool] = []

    def failing_delete(name: str) -> bool:
        namespace, key = name.split("/")
        seen_rows_at_delete.append(services.cache.missing(namespace, [key]) == [])
        raise StorageUnavailable("bucket down")

    with monkeypatch.context() as patched:
        patched.setattr(services.store, "delete", failing_delete)
        result = services.evictor.evict(max_total_bytes=0)
    assert result.evicted == 3
    assert seen_rows_at_delete == [False, False, False]
    assert services.cache.missing("ns", keys) == keys
    assert len(blob_files(settings, "ns")) == 3  # orphans now, for gc
    assert services.admin.gc(grace_seconds=0).orphan_blobs_removed == 3
