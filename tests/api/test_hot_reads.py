"""Entries read a moment ago are answered from memory (cache_server.service.hot); a removal soon reaches
them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.app import create_app
from cache_server.domain import EntryInfo, utcnow
from cache_server.errors import IndexUnavailable, StorageUnavailable
from cache_server.service.hot import HotEntries, ReadStamp
from cache_server.settings import Settings
from cache_server.wiring import Services, build_services
from tests.support.api import put_ok, sha
from tests.support.clock import ManualMonotonic
from tests.support.migrated import migrated

NS = "hot"
URL = f"/v1/namespaces/{NS}/entries"


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
    put_ok(client, NS, "small", small, created=True)
    put_ok(client, NS, "large", large, created=True)
    assert client.get(f"{URL}/small").content == small
    assert client.get(f"{URL}/large").content == large
    unreachable(services, monkeypatch)

    again = client.get(f"{URL}/small")
    assert again.status_code == 200 and again.content == small
    assert again.headers[SHA256_HEADER] == sha(small) and again.headers["etag"] == f'"{sha(small)}"'
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


def build_services_for(settings: Settings, monotonic: ManualMonotonic | None = None) -> Services:
    migrated(settings)
    return build_services(settings, monotonic=monotonic or ManualMonotonic())


def test_the_moment_ends(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    now = ManualMonotonic()
    services = build_services_for(settings, now)
    with TestClient(create_app(settings, services)) as client:
        put_ok(client, NS, "k", b"k" * 100, created=True)
        assert client.get(f"{URL}/k").status_code == 200
        unreachable(services, monkeypatch)
        now.advance(settings.hot_cache_seconds - 0.01)
        assert client.get(f"{URL}/k").status_code == 200
        now.advance(0.01)  # the time counts from the index read, not from the last use
        assert client.get(f"{URL}/k").status_code == 503
        assert client.head(f"{URL}/k").status_code == 503


def test_turned_off_every_read_asks_the_index(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    off = settings.model_copy(update={"hot_cache_bytes": 0})
    services = build_services_for(off)
    with TestClient(create_app(off, services)) as client:
        put_ok(client, NS, "k", b"k" * 100, created=True)
        assert client.get(f"{URL}/k").status_code == 200
        unreachable(services, monkeypatch)
        assert client.get(f"{URL}/k").status_code == 503


def test_what_this_process_removes_is_gone_at_once(client: TestClient) -> None:
    for key in ("deleted", "evicted", "namespace"):
        put_ok(client, NS, key, key.encode() * 100, created=True)
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

    put_ok(client, NS, "namespace", b"again" * 100, created=True)
    assert client.get(f"{URL}/namespace").content == b"again" * 100  # stored again: the new bytes
    assert client.delete(f"/admin/namespaces/{NS}").status_code == 200
    assert client.get(f"{URL}/namespace").status_code == 404


@pytest.fixture
def two_processes(settings: Settings) -> Iterator[tuple[TestClient, TestClient, ManualMonotonic]]:
    """Two server processes' worth of services over one index and one store (as two workers or replicas),
    their memory copies timed by one manual clock."""
    now = ManualMonotonic()
    with (
        TestClient(create_app(settings, build_services_for(settings, now))) as a,
        TestClient(create_app(settings, build_services_for(settings, now))) as b,
    ):
        yield a, b, now


def test_a_removal_by_another_process_is_unseen_for_at_most_the_moment(
    two_processes: tuple[TestClient, TestClient, ManualMonotonic], settings: Settings
) -> None:
    a, b, now = two_processes
    data = b"d" * 1000
    put_ok(a, NS, "k", data, created=True)
    assert a.get(f"{URL}/k").content == data
    assert b.delete(f"{URL}/k").status_code == 204
    assert b.get(f"{URL}/k").status_code == 404
    # a still has the checked bytes it read, and serves them (never other bytes) until its moment ends
    now.advance(settings.hot_cache_seconds / 2)
    assert a.get(f"{URL}/k").content == data
    now.advance(settings.hot_cache_seconds / 2)
    assert a.get(f"{URL}/k").status_code == 404


def test_a_key_stored_anew_through_this_process_is_read_anew(
    two_processes: tuple[TestClient, TestClient, ManualMonotonic],
) -> None:
    a, b, _ = two_processes
    put_ok(a, NS, "k", b"old" * 100, created=True)
    assert a.get(f"{URL}/k").content == b"old" * 100
    assert b.delete(f"{URL}/k").status_code == 204
    put_ok(a, NS, "k", b"new" * 100, created=True)  # created again, with other bytes: a reads its own write
    again = a.get(f"{URL}/k")
    assert again.content == b"new" * 100 and again.headers[SHA256_HEADER] == sha(b"new" * 100)


def test_a_read_under_way_during_a_removal_keeps_nothing(client: TestClient, services: Services) -> None:
    """A read looks the row up and reads the blob; a delete then removes both and returns; only then does
    the read go on to keep its copy. It must not: the entry was removed through this process."""
    put_ok(client, NS, "k", b"k" * 100, created=True)
    hot = services.cache.hot
    real_put = hot.put
    reached, release = threading.Event(), threading.Event()

    def held_put(*args: object, **kwargs: object) -> None:
        reached.set()
        release.wait(10)
        real_put(*args, **kwargs)  # type: ignore[arg-type]

    hot.put = held_put  # type: ignore[method-assign]
    reader = threading.Thread(target=services.cache.read_entry, args=(NS, "k"))
    reader.start()
    assert reached.wait(10)
    hot.put = real_put  # type: ignore[method-assign]
    assert client.delete(f"{URL}/k").status_code == 204
    release.set()
    reader.join(10)
    assert len(hot) == 0
    assert client.get(f"{URL}/k").status_code == 404


def test_gc_dropping_a_row_whose_blob_is_gone_drops_its_copy(client: TestClient, settings_dir: Path) -> None:
    put_ok(client, NS, "k", b"k" * 100, created=True)
    assert client.get(f"{URL}/k").status_code == 200
    (settings_dir / "blobs" / NS / "k").unlink()  # lost: the row is left without its blob
    assert client.post("/admin/gc", json={"grace_seconds": 0}).json()["rows_dropped"] == 1
    assert client.get(f"{URL}/k").status_code == 404


# -- HotEntries itself ----------------------------------------------------------------------------------


def info(key: str, size: int, namespace: str = "n") -> EntryInfo:
    now = utcnow()
    return EntryInfo(namespace, key, size, sha(key.encode()), now, now)


def test_items_expire_the_ttl_after_their_read_began() -> None:
    clock = ManualMonotonic()
    hot = HotEntries(10_000, 1.0, clock=clock)
    stamp = hot.stamp()
    clock.advance(0.5)  # the index lookup and the blob read took half the ttl
    hot.put(info("a", 3), b"abc", stamp)
    clock.advance(0.4)
    item = hot.get("n", "a")
    assert item is not None and item.content == b"abc"
    clock.advance(0.1)  # neither the put nor a get extends it
    assert hot.get("n", "a") is None
    assert len(hot) == 0 and hot.size_bytes == 0
    late = hot.stamp()
    clock.advance(1.0)  # a read slower than the ttl keeps nothing
    hot.put(info("b", 3), b"abc", late)
    assert len(hot) == 0


def test_a_removal_during_a_read_cancels_its_copy() -> None:
    hot = HotEntries(10_000, 60.0, clock=ManualMonotonic())
    stamp = hot.stamp()
    hot.forget([("n", "other")])  # any removal: the read's row may be among those removed
    hot.put(info("a", 3), b"abc", stamp)
    assert hot.get("n", "a") is None
    hot.put(info("a", 3), b"abc", hot.stamp())
    assert hot.get("n", "a") is not None


def cost(hot: HotEntries) -> int:
    """What one item of ``info(key, 1000)`` with 1,000 bytes costs (measured on an empty ``hot``)."""
    hot.put(info("x", 1000), b"x" * 1000, hot.stamp())
    each = hot.size_bytes
    hot.forget([("n", "x")])
    return each


def test_the_budget_is_bytes_and_the_least_recently_used_go_first() -> None:
    each = cost(HotEntries(1 << 20, 60.0, clock=ManualMonotonic()))
    assert each > 1000 + 64  # the bytes, the digest and the names count, and an overhead besides
    hot = HotEntries(3 * each, 60.0, clock=ManualMonotonic())
    for key in "abc":
        hot.put(info(key, 1000), b"x" * 1000, hot.stamp())
    assert hot.get("n", "a") is not None  # now b is the least recently used
    hot.put(info("d", 1000), b"x" * 1000, hot.stamp())
    assert [key for key in "abcd" if hot.get("n", key) is not None] == ["a", "c", "d"]
    assert hot.size_bytes == 3 * each
    hot.put(info("a", 10_000), b"x" * 10_000, hot.stamp())  # larger than the budget: not kept...
    assert hot.get("n", "a") is None and len(hot) == 2  # ...and the older copy of it is gone too


def test_long_names_count() -> None:
    hot = HotEntries(1 << 20, 60.0, clock=ManualMonotonic())
    hot.put(info("k", 0), None, hot.stamp())
    short = hot.size_bytes
    hot.put(info("k" * 255, 0, namespace="n" * 128), None, hot.stamp())
    assert hot.size_bytes - short == short + 254 + 127


def test_expired_items_make_room_first() -> None:
    clock = ManualMonotonic()
    each = cost(HotEntries(1 << 20, 60.0, clock=ManualMonotonic()))
    hot = HotEntries(10 * each, 1.0, clock=clock)
    hot.put(info("o", 1000), b"x" * 1000, hot.stamp())
    clock.advance(2)
    hot.put(info("w", 1000), b"x" * 1000, hot.stamp())
    assert len(hot) == 1 and hot.size_bytes == each


def test_a_row_alone_does_not_replace_the_bytes_of_the_same_entry() -> None:
    hot = HotEntries(10_000, 60.0, clock=ManualMonotonic())
    hot.put(info("a", 3), b"abc", hot.stamp())
    hot.put(info("a", 3), None, hot.stamp())  # a HEAD's lookup of the same entry
    item = hot.get("n", "a")
    assert item is not None and item.content == b"abc"
    other = EntryInfo("n", "a", 3, sha(b"other"), utcnow(), utcnow())
    hot.put(other, None, hot.stamp())  # a different digest: the entry was stored again since
    item = hot.get("n", "a")
    assert item is not None and item.content is None and item.entry.sha256 == sha(b"other")


def test_forget_and_stored() -> None:
    hot = HotEntries(100_000, 60.0, clock=ManualMonotonic())
    for namespace in ("n", "m"):
        hot.put(info("a", 1, namespace), b"x", hot.stamp())
    hot.forget([("n", "a"), ("n", "nothing")])
    assert hot.get("n", "a") is None and hot.get("m", "a") is not None
    stamp = hot.stamp()
    hot.stored("m", "a")  # a new store drops the key's copy, without cancelling reads under way
    assert hot.get("m", "a") is None and len(hot) == 0 and hot.size_bytes == 0
    hot.put(info("b", 1), b"x", stamp)
    assert hot.get("n", "b") is not None


def test_off_keeps_nothing() -> None:
    for hot in (HotEntries(0, 1.0), HotEntries(1 << 20, 0.0)):
        hot.put(info("a", 1), b"x", hot.stamp())
        assert hot.get("n", "a") is None and len(hot) == 0
        assert isinstance(hot.stamp(), ReadStamp)
