"""zstd both ways: bundles for clients that accept it, bulk uploads sent compressed."""

from __future__ import annotations

import io
import random
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import zstandard
from fastapi.testclient import TestClient

from cache_protocol import SHA256_HEADER
from cache_server.app import create_app
from cache_server.service.bulk import GROUP_ENTRIES
from cache_server.settings import Settings
from tests.support.api import member, sha, tar_of
from tests.support.apps import client_for
from tests.support.migrated import migrated
from tests.support.threaded_server import serve_in_thread
from tests.support.wait import wait_until

NS = "/v1/namespaces/ns"
# Executables of one graph at many shapes are nearly alike: so are these.
ENTRIES = {
    f"k{i}": b"HloModule fused_step, shapes f32[%d,128] " % i + bytes(range(256)) * 40 for i in range(50)
}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with client_for(tmp_path) as test_client:
        for key, data in ENTRIES.items():
            assert test_client.put(
                f"{NS}/entries/{key}", content=data, headers={SHA256_HEADER: sha(data)}
            ).is_success
        yield test_client


def members_of(tar_bytes: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r|") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]


def raw_bundle(client: TestClient, accept: str) -> tuple[str | None, bytes]:
    with client.stream(
        "POST", f"{NS}/bundle", json={"keys": list(ENTRIES)}, headers={"Accept-Encoding": accept}
    ) as response:
        assert response.status_code == 200
        return response.headers.get("content-encoding"), b"".join(response.iter_raw())


def test_a_bundle_is_zstd_for_a_client_that_accepts_it(client: TestClient) -> None:
    encoding, body = raw_bundle(client, "gzip, zstd")
    assert encoding == "zstd"
    plain = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
    assert members_of(plain) == ENTRIES
    assert len(body) * 20 < len(plain)  # nearly alike entries shrink many times
    for accept in ("gzip", "identity", "zstd;q=0"):
        encoding, body = raw_bundle(client, accept)
        assert encoding is None and members_of(body) == ENTRIES, accept


def test_bundle_compression_can_be_turned_off(tmp_path: Path) -> None:
    with client_for(tmp_path, bundle_compression=False) as client:
        data = ENTRIES["k1"]
        client.put(f"{NS}/entries/k1", content=data, headers={SHA256_HEADER: sha(data)})
        response = client.post(f"{NS}/bundle", json={"keys": ["k1"]}, headers={"Accept-Encoding": "zstd"})
        assert "content-encoding" not in response.headers and members_of(response.content) == {"k1": data}


def test_a_bulk_upload_may_come_zstd_compressed(tmp_path: Path) -> None:
    with client_for(tmp_path) as client:
        stream = tar_of([member(key, data) for key, data in ENTRIES.items()])
        compressed = zstandard.ZstdCompressor(level=3).compress(stream)
        response = client.post(f"{NS}/entries", content=compressed, headers={"Content-Encoding": "zstd"})
        assert response.status_code == 200 and response.json()["stored"] == len(ENTRIES)
        assert client.get(f"{NS}/entries/k7").content == ENTRIES["k7"]

        refused = client.post(f"{NS}/entries", content=stream, headers={"Content-Encoding": "gzip"})
        assert refused.status_code == 415 and refused.json()["error"] == "unsupported_encoding"
        garbage = client.post(
            f"{NS}/entries", content=b"not zstd" * 100, headers={"Content-Encoding": "zstd"}
        )
        assert garbage.status_code == 400 and "zstd" in garbage.json()["detail"]


def test_a_zstd_bomb_is_bounded_by_the_entry_limit(tmp_path: Path) -> None:
    """A few KB that expand to 64 MiB in one member: refused as too large, never held whole."""
    with client_for(tmp_path, max_entry_bytes=1_000_000) as client:
        huge = b"\0" * (64 * 1024 * 1024)
        info, _ = member("bomb", b"")
        info.size = len(huge)
        info.pax_headers = {**info.pax_headers, "XLA_CACHE.sha256": sha(huge)}
        stream = tar_of([(info, huge)])
        compressed = zstandard.ZstdCompressor(level=3).compress(stream)
        assert len(compressed) < 100_000
        response = client.post(f"{NS}/entries", content=compressed, headers={"Content-Encoding": "zstd"})
        assert response.status_code == 200
        assert [(r["key"], r["status"]) for r in response.json()["results"]] == [("bomb", 413)]


def test_a_zstd_upload_may_not_ask_for_a_huge_window(tmp_path: Path) -> None:
    """A frame's window is memory the server holds while decoding it: ``zstd --long`` asks for 128 MiB, and a
    few such uploads at once would be gigabytes. Frames of up to 8 MiB (every level up to 19) are taken."""
    stream = tar_of([member(key, data) for key, data in ENTRIES.items()])

    def frame(window_log: int) -> bytes:
        params = zstandard.ZstdCompressionParameters.from_level(3, window_log=window_log)
        compressor = zstandard.ZstdCompressor(compression_params=params).compressobj()
        return compressor.compress(stream) + compressor.flush()

    with client_for(tmp_path) as client:
        refused = client.post(f"{NS}/entries", content=frame(27), headers={"Content-Encoding": "zstd"})
        assert refused.status_code == 400 and "window over 8 MiB" in refused.json()["detail"]
        assert client.get(f"{NS}/entries/k7").status_code == 404  # nothing of it was stored
        taken = client.post(f"{NS}/entries", content=frame(23), headers={"Content-Encoding": "zstd"})
        assert taken.status_code == 200 and taken.json()["stored"] == len(ENTRIES)


def test_a_compressed_bulk_upload_is_stored_as_it_arrives(tmp_path: Path) -> None:
    """Executables of one graph shrink tens of times in a zstd stream: the server must not wait for a MiB of
    compressed bytes (a whole push, often) before it stores anything. The client holds back the end of its
    stream until it sees the first group of members stored."""
    # the held-back end must not run into the server's own timeout for a stalled body
    settings = Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0, body_timeout_seconds=120.0)
    migrated(settings)
    rng = random.Random(7)
    first = [member(f"k{i}", rng.randbytes(300)) for i in range(GROUP_ENTRIES)]
    filler = member("filler", rng.randbytes(200_000))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in [*first, filler]:
            tar.addfile(info, io.BytesIO(data))
        held_at = out.tell()
    stream = out.getvalue()
    last_key = first[-1][0].name

    with serve_in_thread(create_app(settings)) as url, httpx.Client(base_url=url, timeout=30) as looker:

        def body() -> Iterator[bytes]:
            compressor = zstandard.ZstdCompressor(level=3).compressobj()
            head = compressor.compress(stream[:held_at]) + compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
            assert len(head) < 1024 * 1024  # under a MiB: the whole upload, had the server waited for one
            yield head
            wait_until(
                lambda: looker.get(f"{NS}/entries/{last_key}").status_code == 200,
                timeout=60.0,  # a real sync of a disk that may be busy; the old code never got there
                message="the first group was not stored while the rest of the stream was held back",
            )
            yield compressor.compress(stream[held_at:]) + compressor.flush()

        response = httpx.post(
            f"{url}{NS}/entries",
            content=body(),
            headers={"Content-Type": "application/x-tar", "Content-Encoding": "zstd"},
            timeout=120,
        )
    assert response.status_code == 200 and response.json()["stored"] == GROUP_ENTRIES + 1
