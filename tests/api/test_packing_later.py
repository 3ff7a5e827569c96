"""Packing later (cache_server.admin.packing): small entries stored without a copy in a pack (single PUTs,
bulk uploads of fewer than PACK_MIN_MEMBERS members) get one from ``POST /admin/pack`` and from the
server's background rounds, and bundles then read them from the pack; what changed or went meanwhile is
left alone. On the local store with packs on, and on GCS (the emulator), where packing pays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.admin.packing import UNREADABLE_RETRY_SECONDS, LoosePacker
from cache_server.app import create_app
from cache_server.errors import StorageUnavailable
from cache_server.service.packs import PACK_BYTES, PACK_MIN_MEMBERS
from cache_server.settings import Settings
from cache_server.storage.base import blob_name
from cache_server.storage.gcs import GcsBlobStore
from cache_server.wiring import build_services
from tests.support.api import put_ok, sha
from tests.support.apps import client_for, services_of
from tests.support.gcs_emulator import fake_gcs_endpoint, gcs_bucket  # noqa: F401 - fixtures
from tests.support.migrated import migrated
from tests.support.packs import (
    NS,
    URL,
    bundle,
    count_gcs_reads,
    drop_own_blobs,
    entries,
    locations,
    packs,
    push,
)
from tests.support.wait import wait_until


@pytest.fixture
def client(tmp_path: Path) -> Any:
    with client_for(tmp_path, packs=True, pack_interval_seconds=3600) as test_client:
        yield test_client


def put_each(client: TestClient, data: dict[str, bytes], namespace: str = NS) -> None:
    for key, value in data.items():
        put_ok(client, namespace, key, value, created=True)


def pack_now(client: TestClient, **body: object) -> dict[str, Any]:
    response = client.post("/admin/pack", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_entries_put_one_at_a_time_are_packed_and_bundled_from_the_pack(
    client: TestClient, tmp_path: Path
) -> None:
    data = entries(10)
    put_each(client, data)
    assert packs(tmp_path) == {} and locations(client, list(data)) == {}

    result = pack_now(client)
    assert result == {
        "entries_checked": 10,
        "entries_packed": 10,
        "packs_written": 1,
        "pack_bytes_written": sum(map(len, data.values())),
        "unreadable": 0,
        "done": True,
    }
    ((pack_id, content),) = packs(tmp_path).items()
    where = locations(client, list(data))
    assert set(where) == set(data)
    for key, (pack, offset) in where.items():
        assert pack == pack_id and content[offset : offset + len(data[key])] == data[key]
    manifest = client.get(f"{URL}/manifest").json()["entries"]
    assert {e["pack"] for e in manifest} == {pack_id}

    drop_own_blobs(client, list(data))  # the bundle can only have read the pack now
    assert bundle(client, list(data)) == data
    assert pack_now(client)["entries_checked"] == 0  # nothing loose is left


def test_small_bulk_uploads_are_packed_later_per_namespace(client: TestClient, tmp_path: Path) -> None:
    """The in-job uploader's passes of a few entries each make no pack; packing later joins them. A
    namespace with fewer loose entries than a pack's minimum gets none, and packs never mix namespaces."""
    first, second = entries(3, tag="a"), {f"b{k}": v for k, v in entries(3, tag="b").items()}
    push(client, first)
    push(client, second)
    few = entries(PACK_MIN_MEMBERS - 1, tag="few")
    put_each(client, few, namespace="other")
    assert packs(tmp_path) == {}

    result = pack_now(client)
    assert (result["entries_checked"], result["entries_packed"], result["packs_written"]) == (9, 6, 1)
    assert set(locations(client, [*first, *second])) == {*first, *second}
    other = services_of(client).cache._entries.get_entries("other", list(few))
    assert {entry.pack for entry in other.values()} == {None}


def test_a_namespace_larger_than_a_pack_gets_several(client: TestClient, tmp_path: Path) -> None:
    data = entries(40, size=PACK_BYTES // 16)
    put_each(client, data)
    result = pack_now(client)
    assert (result["entries_packed"], result["packs_written"]) == (40, 3)
    assert all(len(pack) <= PACK_BYTES for pack in packs(tmp_path).values())
    drop_own_blobs(client, list(data))
    assert bundle(client, list(data)) == data


def test_a_missing_or_damaged_blob_is_left_loose_and_not_read_again(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = entries(8)
    put_each(client, data)
    store = services_of(client).store
    assert store.delete(blob_name(NS, "k0001"))
    damaged = tmp_path / "data" / "blobs" / blob_name(NS, "k0002")
    damaged.write_bytes(b"x" + damaged.read_bytes()[1:])  # same size, other bytes

    result = pack_now(client)
    assert (result["entries_packed"], result["unreadable"]) == (6, 2)
    where = locations(client, list(data))
    assert set(where) == set(data) - {"k0001", "k0002"}
    (content,) = packs(tmp_path).values()
    assert b"".join(data[key] for key in sorted(where)) == content  # no damaged copy went in

    reads: list[str] = []
    original = type(store).read_whole

    def counted(self: object, name: str, limit: int) -> object:
        reads.append(name)
        return original(self, name, limit)  # type: ignore[arg-type]

    monkeypatch.setattr(type(store), "read_whole", counted)
    more = entries(4, tag="more")
    more = {f"m{key}": value for key, value in more.items()}
    put_each(client, more)
    again = pack_now(client)
    assert (again["entries_checked"], again["entries_packed"], again["unreadable"]) == (6, 4, 0)
    assert sorted(reads) == sorted(blob_name(NS, key) for key in more)  # not the two bad ones again


def test_an_unreadable_blob_is_tried_again_after_a_while(client: TestClient) -> None:
    """It may have been stored again with the same bytes meanwhile (a delete, then the same upload)."""
    data = entries(4)
    put_each(client, data)
    services = services_of(client)
    assert services.store.delete(blob_name(NS, "k0003"))
    now = [0.0]
    packer = LoosePacker(services.admin._repository, services.store, monotonic=lambda: now[0])
    assert (packer.round().unreadable, locations(client, list(data))) == (1, {})  # 3 good: too few
    assert client.delete(f"{URL}/entries/k0003").status_code == 204
    put_each(client, {"k0003": data["k0003"]})
    now[0] = UNREADABLE_RETRY_SECONDS - 1
    assert packer.round().entries_packed == 0  # still left alone
    now[0] = UNREADABLE_RETRY_SECONDS + 1
    assert packer.round().entries_packed == 4


def test_entries_removed_while_their_pack_is_written_are_not_pointed_into(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are pointed into the pack only where they still have no pack and the same digest: a key
    deleted and one stored again with other bytes meanwhile keep no copy; a pack nobody points into is
    deleted at once."""
    data = entries(6)
    put_each(client, data)
    store = services_of(client).store
    original = store.put_pack  # type: ignore[attr-defined]
    other = b"stored again with other bytes"

    def meanwhile(pack_id: str, pieces: list[bytes]) -> None:
        original(pack_id, pieces)
        assert client.delete(f"{URL}/entries/k0000").status_code == 204
        assert client.delete(f"{URL}/entries/k0001").status_code == 204
        assert client.put(
            f"{URL}/entries/k0001", content=other, headers={SHA256_HEADER: sha(other)}
        ).is_success

    monkeypatch.setattr(store, "put_pack", meanwhile)
    assert pack_now(client)["entries_packed"] == 4
    assert set(locations(client, list(data))) == set(data) - {"k0000", "k0001"}
    assert bundle(client, ["k0001", "k0002"]) == {"k0001": other, "k0002": data["k0002"]}

    def everything_goes(pack_id: str, pieces: list[bytes]) -> None:
        original(pack_id, pieces)
        for key in fresh:
            assert client.delete(f"/v1/namespaces/fresh/entries/{key}").status_code == 204

    fresh = entries(5, tag="new")
    put_each(client, fresh, namespace="fresh")  # k0001 alone is too few in its namespace
    before = set(packs(tmp_path))
    monkeypatch.setattr(store, "put_pack", everything_goes)
    result = pack_now(client)
    assert (result["entries_packed"], result["packs_written"]) == (0, 0)
    assert set(packs(tmp_path)) == before  # the pack nobody pointed into is gone again


def test_max_entries_bounds_one_call_and_the_next_goes_on(client: TestClient) -> None:
    data = entries(12)
    put_each(client, data)
    first = pack_now(client, max_entries=PACK_MIN_MEMBERS * 2)
    assert (first["entries_checked"], first["entries_packed"], first["done"]) == (8, 8, False)
    second = pack_now(client, max_entries=PACK_MIN_MEMBERS * 2)
    assert (second["entries_checked"], second["entries_packed"], second["done"]) == (4, 4, True)
    assert set(locations(client, list(data))) == set(data)
    for bad in ({"max_entries": 0}, {"max_entries": "5"}, {"max_entries": 10**9}):
        assert client.post("/admin/pack", json=bad).status_code == 400


def test_calls_go_on_past_namespaces_too_small_to_pack(client: TestClient) -> None:
    """Each call goes on where the last one stopped: loose entries that stay loose (a namespace with
    fewer than a pack's minimum) do not hold the next ones back."""
    for namespace in ("a", "b", "c", "d"):
        put_each(client, entries(PACK_MIN_MEMBERS - 1, tag=namespace), namespace=namespace)
    data = entries(8, tag="zz")
    put_each(client, data, namespace="zz")
    packed, calls = 0, 0
    while packed == 0 and calls < 5:
        packed += pack_now(client, max_entries=12)["entries_packed"]
        calls += 1
    assert (packed, calls) == (8, 2)


def test_a_full_page_leaves_its_last_namespace_to_the_next(client: TestClient) -> None:
    """Namespaces a and b with 6 loose entries each and pages of 8: the first page packs a's 6 and leaves
    b's first 2 for the next, which packs b's 6 together (not 2, too few, and then 4)."""
    for namespace in ("a", "b"):
        put_each(client, entries(6, tag=namespace), namespace=namespace)
    services = services_of(client)
    packer = LoosePacker(services.admin._repository, services.store, page=8)
    first = packer.round()
    assert (first.entries_checked, first.entries_packed, first.done) == (6, 6, False)
    second = packer.round()
    assert (second.entries_checked, second.entries_packed, second.done) == (6, 6, True)


def test_a_store_failure_ends_the_call_and_the_next_goes_on_from_the_same_page(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = entries(6)
    put_each(client, data)
    store = services_of(client).store

    def unreachable(pack_id: str, pieces: list[bytes]) -> None:
        raise StorageUnavailable("the bucket cannot be reached")

    monkeypatch.setattr(store, "put_pack", unreachable)
    response = client.post("/admin/pack", json={})
    assert response.status_code == 503 and response.json()["error"] == "storage_unavailable"
    assert locations(client, list(data)) == {}
    monkeypatch.undo()
    assert pack_now(client)["entries_packed"] == 6


def test_rounds_go_on_page_by_page_and_start_over(client: TestClient) -> None:
    data = entries(2 * PACK_MIN_MEMBERS)
    put_each(client, data)
    services = services_of(client)
    packer = LoosePacker(services.admin._repository, services.store, page=PACK_MIN_MEMBERS)
    assert packer.round().entries_packed == PACK_MIN_MEMBERS  # the first page
    assert packer.round().entries_packed == PACK_MIN_MEMBERS  # the next one, not the first again
    last = packer.round()
    assert (last.entries_checked, last.done) == (0, True)
    put_each(client, {"late0": b"a" * 100, "late1": b"b" * 100, "late2": b"c" * 100, "late3": b"d" * 100})
    assert packer.round().entries_packed == 4  # after the end it starts over from the first namespace


def test_the_server_packs_loose_entries_in_the_background(tmp_path: Path) -> None:
    data = entries(6)
    with client_for(tmp_path, packs=True, pack_interval_seconds=3600) as client:
        put_each(client, data)
    with client_for(tmp_path, packs=True, pack_interval_seconds=0.2) as client:  # the same data, restarted
        wait_until(
            lambda: len(locations(client, list(data))) == len(data),
            timeout=10,
            message="the background packer never packed the loose entries",
        )
        assert set(locations(client, list(data))) == set(data)


def test_a_server_without_packs_says_so(tmp_path: Path) -> None:
    with client_for(tmp_path) as client:  # a local store packs only when told to
        response = client.post("/admin/pack", json={})
        assert response.status_code == 501
        assert response.json()["error"] == "packs_off"
        assert "XLA_CACHE_PACKS" in response.json()["detail"]


def test_on_gcs_entries_put_one_at_a_time_come_back_in_one_ranged_read(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint: str = request.getfixturevalue("fake_gcs_endpoint")
    bucket: str = request.getfixturevalue("gcs_bucket")
    settings = Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0, pack_interval_seconds=3600)
    migrated(settings)
    store = GcsBlobStore(bucket, "cache", endpoint=endpoint, retries=2, backoff=0.05)
    with TestClient(create_app(settings, build_services(settings, store=store))) as client:
        data = entries(20)
        put_each(client, data)
        assert pack_now(client)["entries_packed"] == 20
        calls = count_gcs_reads(monkeypatch)
        assert bundle(client, list(data)) == data
    assert calls == {"read_pack": 1, "read_whole": 0, "open": 0}
