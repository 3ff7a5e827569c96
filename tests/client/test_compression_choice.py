"""Whether bulk uploads and bundles travel zstd-compressed: by default uploads always, bundles except from a
server on loopback."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import httpx
import pytest

from tests.support.api import sha
from tests.support.client_kit import UPLOAD_NAMESPACE, RealServer, make_uploader, tar_members
from tests.support.http_stub import Recorded
from xla_cache.config import ClientConfig, Compression, is_loopback, wants_compression
from xla_cache.http.api import CacheApi, RemoteEntry
from xla_cache.http.deadline import Deadline
from xla_cache.transfer.download import DownloadOptions, download

NS = UPLOAD_NAMESPACE


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8080", True),
        ("http://127.3.4.5", True),
        ("http://localhost:80", True),
        ("http://[::1]:8080", True),
        ("https://cache.localhost", True),
        ("http://cache-vm:8080", False),
        ("http://10.0.0.7:8080", False),
        ("http://[2001:db8::1]", False),
        ("http://127.0.0.1.example.com", False),
    ],
)
def test_loopback_is_told_by_the_host_alone(url: str, loopback: bool) -> None:
    assert is_loopback(url) is loopback
    assert wants_compression(url, {}) == Compression(uploads=True, bundles=not loopback)  # auto


def test_the_setting_overrides_auto(caplog: pytest.LogCaptureFixture) -> None:
    both, neither = Compression(uploads=True, bundles=True), Compression(uploads=False, bundles=False)
    assert wants_compression("http://127.0.0.1", {"XLA_CACHE_COMPRESSION": "on"}) == both
    assert wants_compression("http://cache-vm", {"XLA_CACHE_COMPRESSION": "off"}) == neither
    assert wants_compression("http://cache-vm", {"XLA_CACHE_COMPRESSION": "sometimes"}) == both  # auto
    assert "XLA_CACHE_COMPRESSION" in caplog.text


def _plain_tar(body: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(body), mode="r") as tar:
        return tar.getmembers()


def _round_trip(real_server: RealServer, tmp_path: Path, url: str) -> tuple[Recorded, list[Recorded]]:
    """Upload 40 entries through the uploader and download them in bundles, as a client of ``url`` (the
    app's transport either way: the URL only says where the server is); the upload request and the bundle
    requests."""
    source, target = tmp_path / "source", tmp_path / "target"
    source.mkdir()
    target.mkdir()
    data = {str(i): os.urandom(3000 + i) for i in range(40)}
    for key, value in data.items():
        (source / key).write_bytes(value)
    compression = ClientConfig.resolve(server=url).compression  # XLA_CACHE_COMPRESSION, read once there
    api: CacheApi = real_server.api(url, compression=compression)
    assert make_uploader(api, source).flush().uploaded == len(data)
    upload = real_server.requests[-1]
    wanted = [RemoteEntry(key, len(value), sha(value)) for key, value in data.items()]
    result = download(api, NS, wanted, target, DownloadOptions(deadline=Deadline(30)))
    assert (result.entries, result.errors) == (len(data), [])
    for key, value in data.items():
        assert (target / key).read_bytes() == value
    bundles = [r for r in real_server.requests if r.path.endswith("/bundle")]
    assert bundles
    return upload, bundles


@pytest.mark.parametrize("setting", ["auto", "off"])
def test_a_loopback_server_sends_plain_bundles(
    real_server: RealServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    monkeypatch.setenv("XLA_CACHE_COMPRESSION", setting)
    upload, bundles = _round_trip(real_server, tmp_path, "http://127.0.0.1:8080")
    if setting == "off":
        assert "content-encoding" not in upload.headers
        assert len(_plain_tar(upload.body)) == 40
    else:  # auto: uploads are compressed even over loopback (it costs no more there)
        assert upload.headers["content-encoding"] == "zstd"
        assert len(tar_members(upload.body)) == 40
    assert all(r.headers["accept-encoding"] == "identity" for r in bundles)


def test_a_remote_server_gets_zstd_both_ways(real_server: RealServer, tmp_path: Path) -> None:
    upload, bundles = _round_trip(real_server, tmp_path, "http://cache-vm:8080")
    assert upload.headers["content-encoding"] == "zstd"
    assert len(tar_members(upload.body)) == 40
    assert all(r.headers["accept-encoding"] == "zstd" for r in bundles)


def test_a_server_that_refuses_zstd_gets_the_upload_again_plain() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        request.read()
        seen.append(request)
        if request.headers.get("content-encoding") == "zstd":
            return httpx.Response(415, json={"error": "unsupported_encoding", "detail": "no zstd here"})
        return httpx.Response(200, json={"results": [{"key": "1", "status": 201}]})

    api = CacheApi("http://cache-vm:8080", transport=httpx.MockTransport(answer))
    answer_body = api.put_entries(NS, lambda: iter([b"tar bytes"]), Deadline(10))
    assert answer_body == {"results": [{"key": "1", "status": 201}]}
    assert [r.headers.get("content-encoding") for r in seen] == ["zstd", None]
    assert seen[1].content == b"tar bytes"
    api.close()
