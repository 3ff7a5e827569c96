"""Entries read a moment ago are answered from memory (cache_server.hot); a removal soon reaches them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from cache_server.app import create_app
from cache_server.domain import EntryInfo, utcnow
from cache_server.errors import IndexUnavailable, StorageUnavailable
from cache_server.hot import ITEM_OVERHEAD, HotEntries
from cache_server.migrate import upgrade
from cache_server.settings import Settings
from cache_server.wiring import Services, build_services
from tests.conftest import sha

NS = "hot"
URL = f"/v1/namespaces/{NS}/entries"


def put(client: TestClient, key: str, data: bytes) -> None:
    response = client.put(f"{URL}/{key}", content=data, headers={"X-Content-SHA256": sha(data)})
    assert response.status_code == 201, response.text


def unreachable(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on every index lookup and every blob read of the cache service fails."""

    def index_down(*args: object, **kwargs: object) -> None:
        raise IndexUnavailable("the index is down (test)")

    def store_down(*args: object, **kwargs: object) -> None:
        raise StorageUnavailable("the store is down (test)")

    monkeypatch.setattr(services.cache._entries, "get_entry", index_down)
    monkeypatch.setattr(services.store, "open", store_down)


def test_a_read_again_within_the_moment_needs_neither_the_index_nor_the_store(
    client: TestClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    small, large = b"s" * 5000, bytes(range(256)) * 8192  # 2 MiB: streamed, its bytes never kept
    put(client, "small", small)
    put(client, "large", large)
    assert client.get(f"{URL}/small").content == small
    assert client.get(f"{URL}/large").content == large
    unreachable(services, monkeypatch)

    again = client.get(f"{URL}/small")
    assert again.status_code == 200 and again.content == small
    assert again.headers["x-content-sha256"] == sha(small) and again.headers["etag"] == f'"{sha(small)}"'
    for key, data in (("small", small), ("large", large)):
        head = client.head(f"{URL}/{key}")
        assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
        etag = {"If-None-Match": f'"{sha(data)}"'}
        assert client.get(f"{URL}/{key}", headers=etag).status_code == 304
    assert client.get(f"{URL}/large").status_code == 503  # a large entry's bytes come from the store
    assert client.get(f"{URL}/other").status_code == 503  # so does whatever was not read a moment ago

    monkeypatch.undo()
    services.access.flush()
    # the read from memory counted as a hit, as every GET with bytes does (HEAD and 304 do not)
    assert client.get(f"/v1/namespaces/{NS}").json()["hits"] == 3


def build_services_for(settings: Settings) -> Services:
    upgrade(settings)
    return build_services(settings)


def test_the_moment_ends(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    short = settings.model_copy(update={"hot_cache_seconds": 0.3})
    services = build_services_for(short)
    with TestClient(create_app(short, services)) as client:
        put(client, "k", b"k" * 100)
        assert client.get(f"{URL}/k").status_code == 200
        unreachable(services, monkeypatch)
        assert client.get(f"{URL}/k").status_code == 200
        time.sleep(0.35)
        assert client.get(f"{URL}/k").status_code == 503
        assert client.head(f"{URL}/k").status_code == 503


def test_turned_off_every_read_asks_the_index(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    off = settings.model_copy(update={"hot_cache_bytes": 0})
    services = build_services_for(off)
    with TestClient(create_app(off, services)) as client:
        put(client, "k", b"k" * 100)
        assert client.get(f"{URL}/k").status_code == 200
        unreachable(services, monkeypatch)
        assert client.get(f"{URL}/k").status_code == 503


def test_what_this_process_removes_is_gone_at_once(client: TestClient) -> None:
    for key in ("deleted", "evicted", "namespace"):
        put(client, key, key.encode() * 100)
        assert client.get(f"{URL}/{key}").status_code == 200
        assert client.head(f"{URL}/{key}").status_code == 200

    assert client.delete(f"{URL}/deleted").status_code == 204
    assert client.get(f"{URL}/deleted").status_code == 404
    assert client.head(f"{URL}/deleted").status_code == 404

    evicted = client.post("/admin/evict", json={"max_total_bytes": 1, "namespace": NS}).json()
    assert evicted["evicted"] == 2
    for key in ("evicted", "namespace"):
        assert client.get(f"{URL}/{key}").status_code == 404
        assert client.head(f"{URL}/{key}").status_code == 404

    put(client, "namespace", b"again" * 100)
    assert client.get(f"{URL}/namespace").content == b"again" * 100  # stored again: the new bytes
    assert client.delete(f"/admin/namespaces/{NS}").status_code == 200
    assert client.get(f"{URL}/namespace").status_code == 404


@pytest.fixture
def two_processes(settings: Settings) -> Iterator[tuple[TestClient, TestClient]]:
    """Two server processes' worth of services over one index and one store (as two workers or replicas)."""
    short = settings.model_copy(update={"hot_cache_seconds": 0.5})
    upgrade(short)
    with (
        TestClient(create_app(short, build_services(short))) as a,
        TestClient(create_app(short, build_services(short))) as b,
    ):
        yield a, b


def test_a_removal_by_another_process_is_unseen_for_at_most_the_moment(
    two_processes: tuple[TestClient, TestClient],
) -> None:
    a, b = two_processes
    data = b"d" * 1000
    put(a, "k", data)
    assert a.get(f"{URL}/k").content == data
    assert b.delete(f"{URL}/k").status_code == 204
    removed = time.monotonic()
    assert b.get(f"{URL}/k").status_code == 404
    # a still has the checked bytes it read, and serves them (never other bytes) until its moment ends
    while (got := a.get(f"{URL}/k")).status_code == 200:
        assert got.content == data
        assert time.monotonic() - removed < 0.5 + 0.2
        time.sleep(0.05)
    assert got.status_code == 404


# -- HotEntries itself ----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def info(key: str, size: int, namespace: str = "n") -> EntryInfo:
    now = utcnow()
    return EntryInfo(namespace, key, size, sha(key.encode()), now, now)


def test_items_expire_after_the_ttl_from_their_read() -> None:
    clock = Clock()
    hot = HotEntries(10_000, 1.0, clock=clock)
    hot.put(info("a", 3), b"abc")
    clock.now += 0.9
    item = hot.get("n", "a")
    assert item is not None and item.content == b"abc"
    clock.now += 0.1  # a get does not extend it: the ttl counts from the index read
    assert hot.get("n", "a") is None
    assert len(hot) == 0 and hot.size_bytes == 0


def test_the_budget_is_bytes_and_the_least_recently_used_go_first() -> None:
    clock = Clock()
    hot = HotEntries(3 * (ITEM_OVERHEAD + 1000), 60.0, clock=clock)
    for key in "abc":
        hot.put(info(key, 1000), b"x" * 1000)
    assert hot.get("n", "a") is not None  # now b is the least recently used
    hot.put(info("d", 1000), b"x" * 1000)
    assert [key for key in "abcd" if hot.get("n", key) is not None] == ["a", "c", "d"]
    assert hot.size_bytes == 3 * (ITEM_OVERHEAD + 1000)
    hot.put(info("huge", 10_000), b"x" * 10_000)  # larger than the whole budget: not kept, nothing pushed out
    assert hot.get("n", "huge") is None and len(hot) == 3


def test_a_row_alone_does_not_replace_the_bytes_of_the_same_entry() -> None:
    hot = HotEntries(10_000, 60.0, clock=Clock())
    hot.put(info("a", 3), b"abc")
    hot.put(info("a", 3))  # a HEAD's lookup of the same entry
    item = hot.get("n", "a")
    assert item is not None and item.content == b"abc"
    other = EntryInfo("n", "a", 3, sha(b"other"), utcnow(), utcnow())
    hot.put(other)  # a different digest: the entry was stored again since
    item = hot.get("n", "a")
    assert item is not None and item.content is None and item.entry.sha256 == sha(b"other")
    assert hot.size_bytes == ITEM_OVERHEAD


def test_forget() -> None:
    hot = HotEntries(100_000, 60.0, clock=Clock())
    for namespace in ("n", "m"):
        hot.put(info("a", 1, namespace), b"x")
    hot.forget([("n", "a"), ("n", "nothing")])
    assert hot.get("n", "a") is None and hot.get("m", "a") is not None
    assert len(hot) == 1 and hot.size_bytes == ITEM_OVERHEAD + 1


def test_off_keeps_nothing() -> None:
    for hot in (HotEntries(0, 1.0), HotEntries(1 << 20, 0.0)):
        hot.put(info("a", 1), b"x")
        assert hot.get("n", "a") is None and len(hot) == 0
