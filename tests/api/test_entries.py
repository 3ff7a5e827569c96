"""The v1 entry API, in process: every status code DESIGN.md lists, and what is stored after each."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
import types
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

from cache_protocol import SHA256_HEADER
from cache_server.api.entries import _flag
from cache_server.api.schemas import ManifestEntry, ManifestOut
from cache_server.errors import BadRequest
from cache_server.service import CorruptBlob
from cache_server.settings import Settings
from cache_server.wiring import Services
from tests.support.api import put, sha
from tests.support.clock import ManualMonotonic

NS = "ns-test"
URL = f"/v1/namespaces/{NS}/entries"


def stored_files(settings_dir: Path) -> list[Path]:
    blobs = settings_dir / "blobs"
    return sorted(p for p in blobs.rglob("*") if p.is_file()) if blobs.exists() else []


def test_put_creates_then_same_digest_is_200(client: TestClient) -> None:
    first = client.put(f"{URL}/1234", content=b"abc", headers={SHA256_HEADER: sha(b"abc")})
    assert first.status_code == 201
    assert first.json() == {"namespace": NS, "key": "1234", "size": 3, "sha256": sha(b"abc"), "created": True}
    again = client.put(f"{URL}/1234", content=b"abc", headers={SHA256_HEADER: sha(b"abc")})
    assert again.status_code == 200
    assert again.json()["created"] is False


def test_put_other_digest_is_409_and_first_stays(client: TestClient) -> None:
    assert client.put(f"{URL}/k", content=b"first", headers={SHA256_HEADER: sha(b"first")}).status_code == 201
    other = client.put(f"{URL}/k", content=b"second", headers={SHA256_HEADER: sha(b"second")})
    assert other.status_code == 409
    assert other.json()["error"] == "digest_conflict"
    assert "first upload stays" in other.json()["detail"]
    assert client.get(f"{URL}/k").content == b"first"


def test_digest_mismatch_is_400_and_nothing_stored(client: TestClient, settings_dir: Path) -> None:
    response = client.put(f"{URL}/k", content=b"body", headers={SHA256_HEADER: sha(b"other")})
    assert response.status_code == 400
    assert response.json()["error"] == "digest_mismatch"
    assert client.head(f"{URL}/k").status_code == 404
    assert stored_files(settings_dir) == []


@pytest.mark.parametrize(
    ("header", "fragment"),
    [(None, "required"), ("abc", "not a SHA-256"), ("g" * 64, "not a SHA-256"), ("", "required")],
)
def test_missing_or_malformed_digest_is_400(
    client: TestClient, settings_dir: Path, header: str | None, fragment: str
) -> None:
    headers = {} if header is None else {SHA256_HEADER: header}
    response = client.put(f"{URL}/k", content=b"body", headers=headers)
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"
    assert fragment in response.json()["detail"]
    assert stored_files(settings_dir) == []


def test_upper_case_digest_is_accepted(client: TestClient) -> None:
    response = client.put(f"{URL}/k", content=b"x", headers={SHA256_HEADER: sha(b"x").upper()})
    assert response.status_code == 201
    assert response.json()["sha256"] == sha(b"x")


def test_too_large_declared_is_413(client: TestClient, settings: Settings, settings_dir: Path) -> None:
    settings.max_entry_bytes = 10
    response = client.put(f"{URL}/k", content=b"x" * 11, headers={SHA256_HEADER: sha(b"x" * 11)})
    assert response.status_code == 413
    assert response.json()["error"] == "entry_too_large"
    assert "10 bytes" in response.json()["detail"]
    assert stored_files(settings_dir) == []


def test_too_large_streamed_is_413(client: TestClient, settings: Settings, settings_dir: Path) -> None:
    """A chunked body (no Content-Length) is refused once it passes the limit (see also the e2e test)."""
    settings.max_entry_bytes = 1000

    def body() -> object:
        for _ in range(3):
            yield b"y" * 1024 * 1024

    response = client.put(f"{URL}/k", content=body(), headers={SHA256_HEADER: "0" * 64})
    assert response.status_code == 413
    assert stored_files(settings_dir) == []
    assert not list((settings_dir / "blobs" / ".tmp").iterdir())


def test_exactly_at_limit_is_accepted(client: TestClient, settings: Settings) -> None:
    settings.max_entry_bytes = 10
    assert (
        client.put(f"{URL}/k", content=b"x" * 10, headers={SHA256_HEADER: sha(b"x" * 10)}).status_code == 201
    )


BAD_NAMES = [
    ("%2E%2E", "'..'"),  # a literal ".." is normalised away by HTTP clients; the raw form is in tests/e2e
    ("a..b", "'..'"),
    ("a%2Fb", "encoded slash"),
    ("a%2fb", "encoded slash"),
    ("a%5Cb", "encoded slash"),
    ("a%00b", "NUL"),
    ("a\\b", "slash"),
    ("-leading", "must start with a letter or digit"),
    (".hidden", "must start with a letter or digit"),
    ("sp%20ace", "not allowed"),
    ("k" * 256, "at most 255"),
]


@pytest.mark.parametrize(("key", "fragment"), BAD_NAMES)
def test_bad_keys_are_400_and_nothing_stored(
    client: TestClient, settings_dir: Path, key: str, fragment: str
) -> None:
    response = client.put(f"{URL}/{key}", content=b"d", headers={SHA256_HEADER: sha(b"d")})
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_name"
    assert fragment in response.json()["detail"]
    assert stored_files(settings_dir) == []
    assert client.get(f"{URL}/{key}").status_code == 400


def test_slash_in_key_is_400(client: TestClient, settings_dir: Path) -> None:
    response = client.put(f"{URL}/a/b", content=b"d", headers={SHA256_HEADER: sha(b"d")})
    assert response.status_code == 400
    assert "slash" in response.json()["detail"]
    assert stored_files(settings_dir) == []


@pytest.mark.parametrize(
    ("namespace", "fragment"), [("%2E%2E", "'..'"), ("n" * 129, "at most 128"), ("a%2Fb", "slash")]
)
def test_bad_namespaces_are_400(
    client: TestClient, settings_dir: Path, namespace: str, fragment: str
) -> None:
    response = client.put(
        f"/v1/namespaces/{namespace}/entries/k", content=b"d", headers={SHA256_HEADER: sha(b"d")}
    )
    assert response.status_code == 400
    assert fragment in response.json()["detail"]
    assert client.put(f"/v1/namespaces/{namespace}", json={"fingerprint": {}}).status_code == 400
    assert stored_files(settings_dir) == []


def test_empty_key_is_not_an_entry(client: TestClient) -> None:
    response = client.put(f"{URL}/", content=b"d", headers={SHA256_HEADER: sha(b"d")})
    assert response.status_code in (400, 404, 405)
    assert set(response.json()) == {"error", "detail"}


def test_get_head_delete(client: TestClient, settings_dir: Path) -> None:
    data = bytes(range(256)) * 1000
    assert client.put(f"{URL}/9", content=data, headers={SHA256_HEADER: sha(data)}).status_code == 201
    got = client.get(f"{URL}/9")
    assert got.status_code == 200
    assert got.content == data
    assert got.headers[SHA256_HEADER] == sha(data)
    assert got.headers["etag"] == f'"{sha(data)}"'
    head = client.head(f"{URL}/9")
    assert head.status_code == 200
    assert head.headers["content-length"] == str(len(data))
    assert head.content == b""
    assert client.get(f"{URL}/9", headers={"If-None-Match": f'"{sha(data)}"'}).status_code == 304
    assert client.delete(f"{URL}/9").status_code == 204
    assert client.get(f"{URL}/9").status_code == 404
    assert client.delete(f"{URL}/9").status_code == 404
    assert stored_files(settings_dir) == []


def test_get_parameters_are_read_and_documented(client: TestClient, services: Services) -> None:
    """GET and HEAD read their parameters off the request themselves (cache_server/api/entries.py): the
    flag takes FastAPI's spellings, anything else is a 400 naming it, and the OpenAPI document still
    describes every parameter."""
    data = b"flagged"
    assert client.put(f"{URL}/f", content=data, headers={SHA256_HEADER: sha(data)}).status_code == 201
    for spelled in ("1", "true", "Yes", "on", "0", "false", "off"):  # no signed URLs here: bytes either way
        assert client.get(f"{URL}/f?redirect={spelled}").content == data, spelled
    bad = client.get(f"{URL}/f?redirect=maybe")
    assert bad.status_code == 400
    assert bad.json()["error"] == "bad_request" and "'redirect'" in bad.json()["detail"]
    live = client.get(f"{URL}/f", headers={"X-Live-Delivery": "1"})
    assert live.status_code == 200
    services.access.flush()
    assert services.cache.get_namespace(NS).counters.live_deliveries == 1
    document = client.get("/openapi.json").json()["paths"]["/v1/namespaces/{namespace}/entries/{key}"]
    described = {(p["in"], p["name"]) for p in document["get"]["parameters"]}
    assert described == {
        ("path", "namespace"),
        ("path", "key"),
        ("query", "redirect"),
        ("header", "if-none-match"),
        ("header", "x-live-delivery"),
    }
    assert {(p["in"], p["name"]) for p in document["head"]["parameters"]} == {
        ("path", "namespace"),
        ("path", "key"),
    }


def test_miss_is_json_404_and_counted(client: TestClient, services: Services) -> None:
    client.put(f"/v1/namespaces/{NS}", json={"fingerprint": {"a": 1}})
    response = client.get(f"{URL}/absent")
    assert response.status_code == 404
    assert response.json() == {
        "error": "entry_not_found",
        "detail": f"No entry 'absent' in namespace '{NS}'.",
    }
    services.access.flush()
    assert client.get(f"/v1/namespaces/{NS}").json()["misses"] == 1


def test_hits_are_batched_not_written_per_get(client: TestClient, services: Services) -> None:
    put(client, NS, "h", b"hit me")
    for _ in range(5):
        assert client.get(f"{URL}/h").status_code == 200
    entry = services.cache.head_entry(NS, "h")
    assert entry is not None and entry.hits == 0  # nothing written yet: the flush interval is a minute
    services.access.flush()
    entry = services.cache.head_entry(NS, "h")
    assert entry is not None and entry.hits == 5
    body = client.get(f"/v1/namespaces/{NS}").json()
    assert body["hits"] == 5


def test_missing(client: TestClient) -> None:
    put(client, NS, "a", b"1")
    put(client, NS, "c", b"3")
    response = client.post(f"/v1/namespaces/{NS}/missing", json={"keys": ["a", "b", "c", "d", "b"]})
    assert response.status_code == 200
    assert response.json() == {"missing": ["b", "d"]}


def test_missing_with_too_many_keys_is_400(client: TestClient) -> None:
    keys = [f"k{i}" for i in range(10_001)]
    response = client.post(f"/v1/namespaces/{NS}/missing", json={"keys": keys})
    assert response.status_code == 400
    assert response.json()["error"] == "too_many_keys"
    assert "10001" in response.json()["detail"]
    assert client.post(f"/v1/namespaces/{NS}/missing", json={"keys": keys[:10_000]}).status_code == 200


def test_missing_with_bad_key_is_400(client: TestClient) -> None:
    response = client.post(f"/v1/namespaces/{NS}/missing", json={"keys": ["ok", "../etc"]})
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_name"


@pytest.mark.parametrize("path", ["missing", "bundle"])
def test_malformed_json_is_400(client: TestClient, path: str) -> None:
    response = client.post(
        f"/v1/namespaces/{NS}/{path}", content=b'{"keys": [', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json() == {"error": "bad_request", "detail": "The request body is not valid JSON."}
    wrong = client.post(f"/v1/namespaces/{NS}/{path}", json={"keys": "not-a-list"})
    assert wrong.status_code == 400
    assert "keys" in wrong.json()["detail"]


def test_manifest_orders_by_use_and_respects_bounds(client: TestClient, services: Services) -> None:
    for key, size in [("small", 10), ("big", 1000), ("mid", 100), ("cold", 50)]:
        put(client, NS, key, b"z" * size)
    for key, hits in [("big", 3), ("mid", 2), ("small", 1)]:
        for _ in range(hits):
            client.get(f"{URL}/{key}")
    services.access.flush()
    everything = client.get(f"/v1/namespaces/{NS}/manifest").json()
    assert [e["key"] for e in everything["entries"]] == ["big", "mid", "small", "cold"]
    assert everything["total_bytes"] == 1160
    assert everything["entries"][0] == {
        "key": "big",
        "size": 1000,
        "sha256": sha(b"z" * 1000),
        "pack": None,
        "signature": None,
        "prefilled": None,  # a job's own upload (a prefill's names its X-Uploader)
    }
    assert ManifestOut.model_validate(everything).model_dump() == everything  # written without the model
    assert set(everything["entries"][0]) == set(ManifestEntry.model_fields)
    assert everything["bundle_streams"] == 1
    two = client.get(f"/v1/namespaces/{NS}/manifest?max_entries=2").json()
    assert [e["key"] for e in two["entries"]] == ["big", "mid"]
    budget = client.get(f"/v1/namespaces/{NS}/manifest?max_bytes=200").json()
    assert [e["key"] for e in budget["entries"]] == ["mid", "small", "cold"]
    assert budget["total_bytes"] == 160
    assert client.get(f"/v1/namespaces/{NS}/manifest?max_bytes=-1").status_code == 400
    assert client.get(f"/v1/namespaces/{NS}/manifest?max_entries=abc").status_code == 400


def test_bundle_is_a_tar_of_the_present_keys(client: TestClient, services: Services) -> None:
    blobs = {"111": b"one" * 100, "222": b"", "333": bytes(range(256)) * 7}
    for key, data in blobs.items():
        put(client, NS, key, data)
    response = client.post(f"/v1/namespaces/{NS}/bundle", json={"keys": ["333", "absent", "111", "222"]})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r|") as tar:
        members = []
        for member in tar:
            handle = tar.extractfile(member)
            assert handle is not None
            content = handle.read()
            members.append(member.name)
            assert content == blobs[member.name]
            assert member.pax_headers["XLA_CACHE.sha256"] == sha(content)
    assert members == ["333", "111", "222"]
    services.access.flush()
    ns = client.get(f"/v1/namespaces/{NS}").json()
    assert ns["hits"] == 3
    assert ns["misses"] == 1


def test_bundle_with_too_many_keys_is_400(client: TestClient) -> None:
    response = client.post(f"/v1/namespaces/{NS}/bundle", json={"keys": [str(i) for i in range(10_001)]})
    assert response.status_code == 400
    assert response.json()["error"] == "too_many_keys"


def _flip_last_byte(settings_dir: Path, key: str) -> None:
    blob = settings_dir / "blobs" / NS / key
    raw = bytearray(blob.read_bytes())
    raw[-1] ^= 0xFF
    blob.write_bytes(bytes(raw))


def test_a_corrupt_small_entry_is_a_miss_and_its_next_upload_heals_it(
    client: TestClient, settings_dir: Path, services: Services
) -> None:
    data = b"A" * 5000
    put(client, NS, "c", data)
    _flip_last_byte(settings_dir, "c")
    assert client.get(f"{URL}/c").status_code == 404  # checked whole before the first byte: a plain miss
    assert client.head(f"{URL}/c").status_code == 404  # the entry was dropped, row and blob
    assert put(client, NS, "c", data).status_code == 201  # so the next upload stores it again
    assert client.get(f"{URL}/c").content == data
    services.access.flush()
    assert client.get(f"/v1/namespaces/{NS}").json()["misses"] == 1


def test_a_bundle_leaves_out_a_corrupt_member_and_sends_the_rest(
    client: TestClient, settings_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The third probe: one blob of a bundle flipped (no pack copy to fall back on) gave 200, then an
    unhandled CorruptBlob and 0 bytes. Now the member is checked whole before its header, left out (the
    client compiles it), logged in one line without a traceback, and every other member is sent."""
    blobs = {f"{i}": bytes([i]) * (1000 + i) for i in range(1, 6)}
    for key, data in blobs.items():
        put(client, NS, key, data)
    _flip_last_byte(settings_dir, "3")
    with caplog.at_level("WARNING"):
        response = client.post(f"/v1/namespaces/{NS}/bundle", json={"keys": sorted(blobs)})
    assert response.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r|") as tar:
        got = {}
        for member in tar:
            handle = tar.extractfile(member)
            assert handle is not None
            got[member.name] = handle.read()
    assert got == {key: data for key, data in blobs.items() if key != "3"}
    assert client.head(f"{URL}/3").status_code == 404  # dropped: its next upload stores it again
    lines = [r for r in caplog.records if "corrupt" in r.getMessage() and "bundle" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None and "3" in lines[0].getMessage()


def test_a_corrupt_large_entry_is_never_served_whole(client: TestClient, settings_dir: Path) -> None:
    data = bytes(range(256)) * 8192  # 2 MiB: streamed, not read whole
    put(client, NS, "big", data)
    assert client.get(f"{URL}/big").content == data  # hashed whole once, then trusted while unchanged
    _flip_last_byte(settings_dir, "big")  # the file changes, so it is hashed again
    with pytest.raises(CorruptBlob):  # the stream breaks instead of delivering bad bytes
        client.get(f"{URL}/big")
    assert client.head(f"{URL}/big").status_code == 404  # and the entry is dropped


@pytest.mark.parametrize("monotonic", [ManualMonotonic()], indirect=True)
def test_an_unchanged_file_is_hashed_once(
    client: TestClient,
    settings_dir: Path,
    settings: Settings,
    monotonic: ManualMonotonic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = bytes(range(256)) * 8192
    put(client, NS, "big", data)
    hashed: list[int] = []
    real = hashlib.sha256

    def counting(*args: bytes) -> Any:
        hashed.append(1)
        return real(*args)

    counted = types.SimpleNamespace(sha256=counting, blake2b=hashlib.blake2b)
    for module in ("cache_server.service.verify", "cache_server.service.writer"):  # reads, uploads
        monkeypatch.setattr(f"{module}.hashlib", counted)
    for _ in range(3):
        assert client.get(f"{URL}/big").content == data
    assert len(hashed) == 1
    put(client, NS, "small", b"s" * 100)
    for _ in range(3):
        assert client.get(f"{URL}/small").content == b"s" * 100
    assert len(hashed) == 1 + 1 + 1  # the small upload, and its first read (then its copy in memory)
    _flip_last_byte(settings_dir, "small")
    # For up to XLA_CACHE_HOT_CACHE_SECONDS after its read, the checked bytes are served from memory...
    assert client.get(f"{URL}/small").content == b"s" * 100
    monotonic.advance(settings.hot_cache_seconds)
    # ...then the file is read again, and a file that changed is hashed again: the damage is found.
    assert client.get(f"{URL}/small").status_code == 404
    assert len(hashed) == 4


def test_unknown_route_and_method_are_json(client: TestClient) -> None:
    missing = client.get("/v2/nothing")
    assert missing.status_code == 404
    assert set(missing.json()) == {"error", "detail"}
    wrong = client.patch(f"{URL}/k")
    assert wrong.status_code == 405
    assert wrong.json()["error"] == "method_not_allowed"


def test_dropping_a_corrupt_read_spares_the_key_stored_again_since(
    client: TestClient, services: Services
) -> None:
    """A bundle reads a row, the key is evicted and stored again with other bytes, and only then does the
    read find the old digest wrong: the new entry must stay."""
    put(client, NS, "k", b"new bytes")
    stale = dataclasses.replace(services.cache.head_entry(NS, "k"), sha256=sha(b"old bytes"))
    services.cache._verifier.drop_corrupt(stale)
    assert client.get(f"{URL}/k").content == b"new bytes"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (b"", False),
        (b"redirect=1", True),
        (b"redirect=true", True),
        (b"redirect=On", True),
        (b"redirect=yes", True),
        (b"redirect=0", False),
        (b"redirect=false", False),
        (b"redirect=off", False),
        (b"redirect=n", False),
        (b"redirect=0&redirect=1", True),  # the last one, as FastAPI took it
        (b"redirect=", None),
        (b"redirect=%201", None),
        (b"redirect=maybe", None),
    ],
)
def test_the_redirect_flag_reads_as_fastapi_read_it(query: bytes, expected: bool | None) -> None:
    request = Request({"type": "http", "query_string": query, "headers": []})
    if expected is None:
        with pytest.raises(BadRequest, match="'redirect'"):
            _flag(request, "redirect")
    else:
        assert _flag(request, "redirect") is expected
