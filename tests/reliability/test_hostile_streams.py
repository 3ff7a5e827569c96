"""Bulk upload bodies a hostile or unlucky client sends, against a real ``serve`` process with small bounds:
several zstd frames (every one is read), anything after a frame or after the tar stream's end (400), and
bodies that never end: endless global PAX headers, a member declared 10^15 bytes, a stream past the total
limit, a stream past the longest duration (413 or 408, nothing stored past the cut).

Each case prints what it measured; RELIABILITY.md quotes those lines.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import tarfile
from collections.abc import Iterator

import httpx
import pytest
import zstandard

from cache_protocol import BUNDLE_SHA256_PAX
from cache_protocol.tar import BLOCK, END, member_header, padding
from cache_server.service.bulk import GROUP_ENTRIES
from tests.support.api import stream_member
from tests.support.chunked import stream_until_answered
from tests.support.server import LiveServer, run_server

MIB = 1024 * 1024
MAX_BYTES = 2 * MIB
MAX_HEADER_BYTES = 256 * 1024
MAX_SECONDS = 4.0  # long enough for the other cases to reach their bounds first on a busy machine
BOUNDS = {
    "XLA_CACHE_MAX_BULK_BYTES": str(MAX_BYTES),
    "XLA_CACHE_MAX_BULK_HEADER_BYTES": str(MAX_HEADER_BYTES),
    "XLA_CACHE_MAX_BULK_SECONDS": str(MAX_SECONDS),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, server_env: dict[str, str]) -> Iterator[LiveServer]:
    with run_server(tmp_path_factory.mktemp("streams"), {**server_env, **BOUNDS}) as live:
        yield live


def data_of(index: int, size: int) -> bytes:
    return (hashlib.sha256(str(index).encode()).digest() * (size // 32 + 1))[:size]


def tar(keys: list[str], size: int = 100) -> bytes:
    return b"".join(stream_member(key, data_of(i, size)) for i, key in enumerate(keys)) + END


def stored(server: LiveServer, namespace: str) -> set[str]:
    answer = httpx.get(f"{server.url}/v1/namespaces/{namespace}/manifest")
    return {entry["key"] for entry in answer.json()["entries"]}


def post(server: LiveServer, namespace: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/namespaces/{namespace}/entries", content=body, headers=headers)


def zstd(data: bytes, **params: int) -> bytes:
    if not params:
        return zstandard.ZstdCompressor().compress(data)
    compressor = zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters.from_level(19, **params)
    ).compressobj()  # streamed: the frame declares its window, not its (small) content size
    return compressor.compress(data) + compressor.flush()


def test_every_zstd_frame_of_a_body_is_read(server: LiveServer) -> None:
    keys = [f"k{i:02d}" for i in range(40)]
    body = tar(keys)
    cuts = [i * len(body) // 40 for i in range(41)]
    frames = b"".join(zstd(body[a:b]) for a, b in itertools.pairwise(cuts))  # as pzstd or cat a.zst b.zst
    answer = post(server, "frames", frames, **{"Content-Encoding": "zstd"})
    print(f"\n40 members in 40 zstd frames: {answer.status_code}, stored={answer.json()['stored']}")
    assert answer.status_code == 200 and answer.json()["stored"] == 40
    assert stored(server, "frames") == set(keys)


@pytest.mark.parametrize(
    ("case", "after"),
    [
        ("garbage after a frame", b"garbage!"),
        ("a frame asking a 128 MiB window", zstd(b"more", window_log=27)),
        ("a frame cut short", zstd(b"more" * 100)[:-3]),
    ],
)
def test_what_follows_a_zstd_frame_is_read_or_refused(server: LiveServer, case: str, after: bytes) -> None:
    namespace = "after-" + case.split()[1]
    body = zstd(tar(["a", "b"])) + after
    answer = post(server, namespace, body, **{"Content-Encoding": "zstd"})
    print(f"\n{case}: {answer.status_code} {answer.json()['detail']}")
    assert answer.status_code == 400 and answer.json()["error"] == "bad_request"
    assert stored(server, namespace) == set()  # the stream broke in its first group: nothing of it is kept


def test_data_after_the_tar_end_is_refused_and_what_was_committed_stays(server: LiveServer) -> None:
    keys = [f"k{i:04d}" for i in range(GROUP_ENTRIES + 88)]
    padded = tar(["a"]) + bytes(10240 - len(tar(["a"])) % 10240)  # GNU tar's record padding: fine
    assert post(server, "padded", padded).status_code == 200
    answer = post(server, "second-tar", tar(keys) + tar(["x"]))
    print(f"\na second tar after the first: {answer.status_code} {answer.json()['detail']}")
    assert answer.status_code == 400
    assert "after the end of the tar stream" in answer.json()["detail"]
    # the broken-stream rule: the group committed before the error stays, nothing of the one it broke in
    assert stored(server, "second-tar") == set(keys[:GROUP_ENTRIES])
    zstd_answer = post(server, "second-zstd", zstd(tar(["a"]) + b"garbage"), **{"Content-Encoding": "zstd"})
    assert zstd_answer.status_code == 400 and stored(server, "second-zstd") == set()


def global_pax_headers() -> Iterator[bytes]:
    """Global PAX headers (type g) of 60 KiB each, without end (64 MiB at most, should the server read on)."""
    out = io.BytesIO()
    tarfile.open(
        fileobj=out, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "x" * 60_000}
    ).close()
    header = out.getvalue().rstrip(b"\0")  # the global header alone, without the end of the archive
    header += padding(len(header))
    for _ in range(64 * MIB // len(header)):
        yield header


def test_endless_global_pax_headers_are_cut_with_413(server: LiveServer) -> None:
    cut = stream_until_answered(server.url, "POST", "/v1/namespaces/pax/entries", global_pax_headers())
    print(
        f"\nendless global PAX headers: {cut.status} after {cut.sent / MIB:.1f} MiB sent "
        f"in {cut.seconds:.2f} s"
    )
    assert cut.status == 413 and json.loads(cut.body)["error"] == "upload_too_large"
    assert "bytes of headers come between two members" in json.loads(cut.body)["detail"]
    assert cut.sent < 16 * MIB and cut.seconds < 10


def test_a_member_declared_10_to_the_15_bytes_ends_the_request_at_once(server: LiveServer) -> None:
    head = member_header("huge", 10**15, records={BUNDLE_SHA256_PAX: "0" * 64})
    cut = stream_until_answered(
        server.url,
        "POST",
        "/v1/namespaces/huge/entries",
        itertools.chain([head], itertools.repeat(bytes(MIB), 64)),
    )
    print(
        f"\na member declared 10^15 bytes: {cut.status} after {cut.sent / MIB:.1f} MiB sent "
        f"in {cut.seconds:.2f} s"
    )
    assert cut.status == 413 and "declares 1000000000000000 bytes" in json.loads(cut.body)["detail"]
    assert cut.sent < 16 * MIB
    declared = stream_until_answered(server.url, "POST", "/v1/namespaces/huge/entries", [], length=10**12)
    assert declared.status == 413 and json.loads(declared.body)["error"] == "upload_too_large"


def test_a_stream_past_the_total_limit_is_cut_and_nothing_past_the_cut_is_stored(server: LiveServer) -> None:
    keys = (f"k{i:05d}" for i in itertools.count())
    members = (stream_member(key, data_of(i, 512)) for i, key in enumerate(keys))  # 2 KiB each with headers
    cut = stream_until_answered(server.url, "POST", "/v1/namespaces/total/entries", members)
    kept = stored(server, "total")
    print(
        f"\na stream past {MAX_BYTES / MIB:.0f} MiB: {cut.status} after {cut.sent / MIB:.1f} MiB sent "
        f"({cut.sent // 2048} members) in {cut.seconds:.2f} s; stored {len(kept)} "
        "(the whole groups before the cut)"
    )
    assert cut.status == 413 and json.loads(cut.body)["error"] == "upload_too_large"
    groups = len(kept) // GROUP_ENTRIES
    assert groups >= 1 and kept == {f"k{i:05d}" for i in range(groups * GROUP_ENTRIES)}
    assert groups * GROUP_ENTRIES * 2048 <= MAX_BYTES
    skippable = b"\x50\x2a\x4d\x18" + (64 * 1024).to_bytes(4, "little") + bytes(64 * 1024)
    frames = stream_until_answered(
        server.url,
        "POST",
        "/v1/namespaces/skippable/entries",
        itertools.repeat(skippable, 1024),
        headers={"Content-Encoding": "zstd"},
    )
    print(f"endless skippable zstd frames: {frames.status} after {frames.sent / MIB:.1f} MiB sent")
    assert frames.status == 413 and frames.sent < 16 * MIB


def test_a_stream_past_the_longest_duration_is_cut_with_408(server: LiveServer) -> None:
    # ~90 KiB/s, over the rate
    members = (stream_member(f"k{i:05d}", data_of(i, 8192)) for i in itertools.count())
    cut = stream_until_answered(server.url, "POST", "/v1/namespaces/slow/entries", members, pace=0.1)
    print(
        f"\na stream past {MAX_SECONDS:g} s: {cut.status} after {cut.sent / 1024:.0f} KiB "
        f"in {cut.seconds:.2f} s"
    )
    assert cut.status == 408 and "XLA_CACHE_MAX_BULK_SECONDS" in json.loads(cut.body)["detail"]
    assert MAX_SECONDS <= cut.seconds < MAX_SECONDS + 5
    assert stored(server, "slow") == set()


def test_the_defaults_never_cut_what_the_client_sends() -> None:
    from cache_server.settings import Settings
    from xla_cache.transfer.upload import BULK_GROUP_BYTES, BULK_GROUP_ENTRIES, BULK_MEMBER_LIMIT

    settings = Settings()
    largest_push = BULK_GROUP_BYTES + BULK_MEMBER_LIMIT + BULK_GROUP_ENTRIES * 3 * BLOCK  # entries + headers
    assert largest_push * 16 < settings.max_bulk_bytes
    assert largest_push / settings.max_bulk_seconds < 64 * 1024  # 64 KiB/s is enough to send it in time
    assert settings.max_bulk_header_bytes >= 16 * 64 * 1024
