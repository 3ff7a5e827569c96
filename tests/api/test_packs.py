"""Packs (cache_server.service.packs): a bulk upload also writes its small entries as one object per group,
and a bundle reads those copies by byte range, checks each, and falls back to the entry's own blob. On the
local store here (``XLA_CACHE_PACKS=true``); the GCS store's requests are counted in tests/storage."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.app import create_app
from cache_server.service.packs import PACK_BYTES, PACK_MEMBER_BYTES, PACK_MIN_MEMBERS
from cache_server.settings import Settings
from cache_server.storage.base import PACK_DIR
from cache_server.storage.gcs import GcsBlobStore
from cache_server.wiring import build_services
from tests.support.api import member, sha, tar_of
from tests.support.apps import client_for, services_of
from tests.support.gcs_emulator import fake_gcs_endpoint, gcs_bucket  # noqa: F401 - fixtures
from tests.support.migrated import migrated
from tests.support.packs import (
    URL,
    bundle,
    count_gcs_reads,
    drop_own_blobs,
    entries,
    locations,
    packs,
    push,
)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with client_for(tmp_path, packs=True) as test_client:
        yield test_client


def test_bundle_reads_the_copies_in_packs(client: TestClient, tmp_path: Path) -> None:
    data = entries(40)
    data["big"] = os.urandom(5 * 1024 * 1024)  # over the member limit: stored on its own only
    assert set(push(client, data).values()) == {201}
    written = packs(tmp_path)
    assert len(written) == 1
    where = locations(client, list(data))
    assert set(where) == set(data) - {"big"}
    for key, (pack, offset) in where.items():  # each copy is the entry's bytes, where the row says
        assert written[pack][offset : offset + len(data[key])] == data[key]

    manifest = client.get(f"{URL}/manifest").json()["entries"]
    assert {e["key"]: e["pack"] for e in manifest} == {k: where[k][0] if k in where else None for k in data}

    small = [key for key in data if key != "big"]
    drop_own_blobs(client, small)
    assert bundle(client, ["big", *small[::3]]) == {key: data[key] for key in ["big", *small[::3]]}


def test_a_group_is_cut_before_its_pack_passes_the_limit(client: TestClient, tmp_path: Path) -> None:
    data = entries(40, size=PACK_BYTES // 16)  # about 2.5 packs' worth
    assert set(push(client, data).values()) == {201}
    sizes = sorted(len(pack) for pack in packs(tmp_path).values())
    assert len(sizes) == 3 and max(sizes) <= PACK_BYTES, sizes
    assert sum(sizes) == sum(len(value) for value in data.values())
    drop_own_blobs(client, list(data))
    assert bundle(client, list(data)) == data


def test_few_or_refused_members_make_no_copies(client: TestClient, tmp_path: Path) -> None:
    few = entries(PACK_MIN_MEMBERS - 1, tag="few")
    assert set(push(client, few).values()) == {201}
    assert packs(tmp_path) == {}
    assert locations(client, list(few)) == {}
    assert bundle(client, list(few)) == few  # from the own blobs

    data = {f"mixed-{key}": value for key, value in entries(8).items()}
    stream = tar_of(
        [member(key, value) for key, value in data.items()] + [member("liar", b"x" * 100, digest=sha(b"y"))]
    )
    response = client.post(f"{URL}/entries", content=stream, headers={"Content-Type": "application/x-tar"})
    assert response.status_code == 200
    (pack,) = packs(tmp_path).values()
    assert len(pack) == sum(len(value) for value in data.values())  # the refused member has no copy
    assert set(locations(client, [*data, "liar"])) == set(data)


def test_a_damaged_pack_is_forgotten_and_the_own_blobs_are_read(client: TestClient, tmp_path: Path) -> None:
    data = entries(12)
    push(client, data)
    (pack_id,) = packs(tmp_path)
    path = tmp_path / "data" / "blobs" / PACK_DIR / pack_id
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))

    assert bundle(client, list(data)) == data  # every member whole: the damaged copy was not sent
    assert locations(client, list(data)) == {}  # no row points into the damaged pack any more
    assert packs(tmp_path) == {}  # and it is gone


def test_a_missing_pack_falls_back_to_the_own_blobs(client: TestClient, tmp_path: Path) -> None:
    data = entries(12)
    push(client, data)
    (pack_id,) = packs(tmp_path)
    assert services_of(client).store.delete_pack(pack_id)  # type: ignore[attr-defined]
    assert bundle(client, list(data)) == data
    assert locations(client, list(data)) == {}


def test_a_key_stored_again_by_a_put_loses_its_copy(client: TestClient) -> None:
    data = entries(8)
    push(client, data)
    assert client.delete(f"{URL}/entries/k0001").status_code == 204
    other = b"other bytes"
    assert client.put(f"{URL}/entries/k0001", content=other, headers={SHA256_HEADER: sha(other)}).is_success
    assert "k0001" not in locations(client, list(data))
    assert bundle(client, ["k0001", "k0002"]) == {"k0001": other, "k0002": data["k0002"]}


def test_gc_keeps_a_pack_while_a_row_points_into_it(client: TestClient, tmp_path: Path) -> None:
    data = entries(8)
    push(client, data)
    for key in list(data)[:-1]:
        assert client.delete(f"{URL}/entries/{key}").status_code == 204
    gc = client.post("/admin/gc", json={"grace_seconds": 0}).json()
    assert (gc["packs_checked"], gc["packs_removed"]) == (1, 0)
    assert client.delete(f"{URL}/entries/{list(data)[-1]}").status_code == 204
    dry = client.post("/admin/gc", json={"grace_seconds": 0, "dry_run": True}).json()
    assert (dry["packs_removed"], dry["pack_bytes_removed"]) == (1, sum(map(len, data.values())))
    assert len(packs(tmp_path)) == 1
    young = client.post("/admin/gc", json={"grace_seconds": 3600}).json()
    assert young["packs_removed"] == 0  # a pack younger than the grace period may be waiting for its rows
    assert client.post("/admin/gc", json={"grace_seconds": 0}).json()["packs_removed"] == 1
    assert packs(tmp_path) == {}


def test_packs_are_off_by_default_on_the_local_store(tmp_path: Path) -> None:
    with client_for(tmp_path) as client:
        data = entries(12)
        push(client, data)
        assert packs(tmp_path) == {}
        assert bundle(client, list(data)) == data


def test_a_gcs_bundle_reads_a_pack_in_one_request_not_one_per_entry(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On GCS packs are on by default: 40 entries pushed in one bulk upload come back from one ranged GET."""
    endpoint: str = request.getfixturevalue("fake_gcs_endpoint")
    bucket: str = request.getfixturevalue("gcs_bucket")
    calls = count_gcs_reads(monkeypatch)
    settings = Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0)
    migrated(settings)
    store = GcsBlobStore(bucket, "cache", endpoint=endpoint, retries=2, backoff=0.05)
    with TestClient(create_app(settings, build_services(settings, store=store))) as client:
        data = entries(40)
        assert set(push(client, data).values()) == {201}
        assert len(list(store.list_packs())) == 1
        assert bundle(client, list(data)) == data
    assert calls == {"read_pack": 1, "read_whole": 0, "open": 0}


def test_budget_eviction_removes_the_packs_it_emptied(tmp_path: Path) -> None:
    """Packs older than gc's grace period whose entries budget eviction removed go with them, no gc needed;
    a pack with a row left stays."""
    first = {f"a{key}": value for key, value in entries(8).items()}
    second = {f"b{key}": value for key, value in entries(8).items()}
    budget = sum(map(len, second.values()))
    with client_for(tmp_path, packs=True, max_total_bytes=budget, eviction_interval_seconds=3600) as client:
        push(client, first)
        push(client, second)
        assert len(packs(tmp_path)) == 2
        for pack_id in packs(tmp_path):  # written two hours ago
            path = tmp_path / "data" / "blobs" / PACK_DIR / pack_id
            os.utime(path, (path.stat().st_atime - 7200, path.stat().st_mtime - 7200))
        kept_pack = locations(client, list(second))["bk0000"][0]
        services_of(client).admin._enforce_budgets()  # what the background eviction runs
        assert locations(client, list(first)) == {}
        assert set(packs(tmp_path)) == {kept_pack}


def test_a_pack_whose_entries_were_all_stored_before_is_deleted_again(
    client: TestClient, tmp_path: Path
) -> None:
    data = entries(12)
    push(client, data)
    (first,) = packs(tmp_path)
    assert set(push(client, data).values()) == {200}  # the same push again (a second host, say)
    assert set(packs(tmp_path)) == {first}  # its pack held no new entry: gone at once
    assert {pack for pack, _ in locations(client, list(data)).values()} == {first}


def test_a_pack_that_fails_to_write_costs_no_entry(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(pack_id: str, pieces: object) -> None:
        raise OSError("no space left for packs")

    monkeypatch.setattr(services_of(client).store, "put_pack", refuse)
    data = entries(12)
    assert set(push(client, data).values()) == {201}
    assert locations(client, list(data)) == {}
    assert bundle(client, list(data)) == data


def test_an_unreadable_pack_is_skipped_but_kept(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pack the store cannot read right now (an outage) is not forgotten: it may answer again soon."""
    data = entries(12)
    push(client, data)
    where = locations(client, list(data))

    def unreachable(pack_id: str, start: int, length: int) -> bytes:
        raise OSError("the bucket is not answering")

    monkeypatch.setattr(services_of(client).store, "read_pack", unreachable)
    assert bundle(client, list(data)) == data  # from the own blobs
    assert locations(client, list(data)) == where
    assert len(packs(tmp_path)) == 1


def test_a_damaged_pack_that_cannot_be_forgotten_still_gives_a_whole_bundle(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = entries(12)
    push(client, data)
    (pack_id,) = packs(tmp_path)
    (tmp_path / "data" / "blobs" / PACK_DIR / pack_id).write_bytes(b"\0" * 100)

    def index_down(pack_ids: object) -> int:
        raise OSError("the index is not answering")

    monkeypatch.setattr(services_of(client).cache._entries, "forget_packs", index_down)
    assert bundle(client, list(data)) == data


def test_a_broken_stream_leaves_no_pack(client: TestClient, tmp_path: Path) -> None:
    """Packs are written as the stream goes on; a stream that breaks before its group commits takes its
    packs with it (their entries were not stored)."""
    data = entries(24, size=PACK_BYTES // 8)  # three packs' worth, sealed while the stream goes on
    stream = tar_of([member(key, value) for key, value in data.items()])
    response = client.post(f"{URL}/entries", content=stream[: len(stream) * 95 // 100])
    assert response.status_code == 400
    assert packs(tmp_path) == {}
    assert locations(client, list(data)) == {}


def test_members_over_the_copy_limit_are_stored_alone(client: TestClient, tmp_path: Path) -> None:
    data = {f"big{i}": os.urandom(PACK_MEMBER_BYTES + 1 + i) for i in range(6)}
    assert set(push(client, data).values()) == {201}
    assert packs(tmp_path) == {}
    assert bundle(client, list(data)) == data
