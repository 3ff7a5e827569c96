"""Bulk upload (``POST /v1/namespaces/{ns}/entries``): one tar stream, each member the outcome of a PUT."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cache_protocol import BUNDLE_COMPILE_TIME_PAX, SHA256_HEADER
from cache_protocol.tar import END, _ustar
from cache_server.api.schemas import BulkMemberOut, BulkOut
from cache_server.app import create_app
from cache_server.service.bulk import GROUP_ENTRIES
from cache_server.settings import Settings
from tests.support.api import member, sha, tar_of
from tests.support.migrated import migrated

URL = "/v1/namespaces/ns/entries"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0, max_entry_bytes=10_000)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    migrated(settings)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def blobs(settings: Settings) -> list[str]:
    root = settings.data_dir / "blobs"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_each_member_gets_the_status_a_put_would(client: TestClient, settings: Settings) -> None:
    assert client.put(f"{URL}/same", content=b"same", headers={SHA256_HEADER: sha(b"same")}).is_success
    assert client.put(f"{URL}/taken", content=b"old", headers={SHA256_HEADER: sha(b"old")}).is_success
    stream = tar_of(
        [
            member("new1", b"one", **{BUNDLE_COMPILE_TIME_PAX: "1500"}),
            member("same", b"same"),
            member("taken", b"other bytes"),
            member("liar", b"these bytes", digest=sha(b"other")),
            member("huge", b"x" * 10_001),
            member("bad..name", b"x"),
            member("no-digest", b"x", digest=""),
            member("new2", b"two"),
            member("new1", b"one"),  # twice in one stream
        ]
    )
    response = client.post(URL, content=stream, headers={"Content-Type": "application/x-tar"})
    assert response.status_code == 200, response.text
    body = response.json()
    statuses = {(r["key"], r["status"], r["error"]) for r in body["results"]}
    assert statuses == {
        ("new1", 201, None),
        ("same", 200, None),
        ("taken", 409, "digest_conflict"),
        ("liar", 400, "digest_mismatch"),
        ("huge", 413, "entry_too_large"),
        ("bad..name", 400, "invalid_name"),
        ("no-digest", 400, "invalid_name"),
        ("new2", 201, None),
        ("new1", 400, "invalid_name"),
    }
    assert (body["stored"], body["already_stored"], body["refused"]) == (2, 1, 6)
    assert response.headers["content-type"] == "application/json"
    # the body is written without the model: it must still be exactly what the schema says
    assert BulkOut.model_validate(body).model_dump() == body
    assert set(body["results"][0]) == set(BulkMemberOut.model_fields)
    assert client.get(f"{URL}/new1").content == b"one"
    assert client.get(f"{URL}/new2").content == b"two"
    assert client.get(f"{URL}/taken").content == b"old"
    for key in ("liar", "huge"):
        assert client.get(f"{URL}/{key}").status_code == 404
    assert blobs(settings) == ["ns/new1", "ns/new2", "ns/same", "ns/taken"]  # no temp file left
    namespace = client.get("/v1/namespaces/ns").json()
    assert (namespace["entries"], namespace["uploads"]) == (4, 4)
    stats = client.get("/admin/stats").json()["totals"]
    assert stats["uploads"] == 4 and stats["bytes_uploaded"] == len(b"samoldonetwo") + 1


def test_more_members_than_one_group_are_all_stored(client: TestClient, settings: Settings) -> None:
    count = GROUP_ENTRIES + 88
    stream = tar_of([member(f"k{i}", b"entry %d" % i) for i in range(count)])
    body = client.post(URL, content=stream).json()
    assert body["stored"] == count and body["refused"] == 0
    missing = client.post("/v1/namespaces/ns/missing", json={"keys": [f"k{i}" for i in range(count)]})
    assert missing.json()["missing"] == []
    assert client.get(f"{URL}/k{count - 1}").content == b"entry %d" % (count - 1)
    again = client.post(URL, content=stream).json()  # the same stream again: all already there
    assert (again["stored"], again["already_stored"]) == (0, count)


def test_a_stream_cut_short_keeps_the_groups_committed_before_it(
    client: TestClient, settings: Settings
) -> None:
    count = GROUP_ENTRIES + 40
    stream = tar_of([member(f"k{i}", b"entry %d" % i * 10) for i in range(count)])
    response = client.post(URL, content=stream[: len(stream) * 98 // 100])
    assert response.status_code == 400
    assert "tar stream" in response.json()["detail"]
    stored = set(
        client.post("/v1/namespaces/ns/missing", json={"keys": [f"k{i}" for i in range(count)]}).json()[
            "missing"
        ]
    )
    assert len(stored) == 40  # exactly the broken group is missing
    assert all(f"k{i}" not in stored for i in range(GROUP_ENTRIES))
    assert len(blobs(settings)) == GROUP_ENTRIES  # nothing of the broken group, no temp file


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (tarfile.SYMTYPE, "only regular files"),
        (tarfile.LNKTYPE, "only regular files"),
        (tarfile.DIRTYPE, "only regular files"),
        (tarfile.CHRTYPE, "only regular files"),
    ],
)
def test_links_directories_and_devices_are_refused(
    client: TestClient, settings: Settings, kind: bytes, expected: str
) -> None:
    odd = tarfile.TarInfo("k2")
    odd.type = kind
    odd.linkname = "../../etc/passwd"
    stream = tar_of([member("k1", b"fine"), (odd, b"")])
    response = client.post(URL, content=stream)
    assert response.status_code == 400 and expected in response.json()["detail"]
    assert not any("k2" in name for name in blobs(settings))


def test_an_oversized_pax_header_and_garbage_are_refused_at_once(client: TestClient) -> None:
    info, data = member("k", b"x")
    info.pax_headers = {**info.pax_headers, "comment": "c" * 200_000}
    response = client.post(URL, content=tar_of([(info, data)]))
    assert response.status_code == 400 and "over the limit" in response.json()["detail"]
    # a negative size (octal fields take a sign) must not send the reader back over the same header forever
    for kind in (b"x", b"0"):
        header = _ustar(b"././@PaxHeader" if kind == b"x" else b"k", -512, 0, kind)
        negative = client.post(URL, content=header + END)
        assert negative.status_code == 400 and "negative" in negative.json()["detail"]
    garbage = client.post(URL, content=b"not a tar stream at all" * 100)
    assert garbage.status_code == 400 and "checksum" in garbage.json()["detail"]
    assert client.post(URL, content=b"").json()["results"] == []


def test_too_many_members_are_refused(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", max_keys_per_request=5)
    migrated(settings)
    with TestClient(create_app(settings)) as client:
        response = client.post(URL, content=tar_of([member(f"k{i}", b"x") for i in range(6)]))
        assert response.status_code == 400 and "more than 5 members" in response.json()["detail"]


def test_a_bulk_upload_into_a_bad_namespace_is_refused_whole(client: TestClient, settings: Settings) -> None:
    """The writer checks the namespace once, before the first member is read (the route no longer does)."""
    response = client.post("/v1/namespaces/bad..ns/entries", content=tar_of([member("k", b"x")]))
    assert response.status_code == 400 and response.json()["error"] == "invalid_name", response.text
    assert blobs(settings) == []


def test_members_of_the_next_group_read_while_a_group_commits_get_what_a_put_would(
    client: TestClient, settings: Settings
) -> None:
    """The first group commits while the second is read (service/bulk.py): a member there that fails its
    digest or repeats a key of the committing group is refused alone, as before; the rest are stored."""
    count = GROUP_ENTRIES + 10
    members = [member(f"k{i}", b"entry %d" % i) for i in range(count)]
    members[GROUP_ENTRIES + 2] = member(f"k{GROUP_ENTRIES + 2}", b"lies", digest=sha(b"other"))
    members[GROUP_ENTRIES + 5] = member("k3", b"entry 3 again")
    body = client.post(URL, content=tar_of(members)).json()
    statuses = [(result["key"], result["status"], result["error"]) for result in body["results"]]
    expected = [(f"k{i}", 201, None) for i in range(count)]
    expected[GROUP_ENTRIES + 2] = (f"k{GROUP_ENTRIES + 2}", 400, "digest_mismatch")
    expected[GROUP_ENTRIES + 5] = ("k3", 400, "invalid_name")
    assert statuses == expected
    assert (body["stored"], body["refused"]) == (count - 2, 2)
    assert client.get(f"{URL}/k3").content == b"entry 3"  # the committed group's bytes, not the repeat's
    assert client.get(f"{URL}/k{GROUP_ENTRIES + 2}").status_code == 404
    assert len(blobs(settings)) == count - 2  # no temp file, no blob of a refused member
