"""The GCS store against a scripted JSON API: what the emulator cannot show.

fake-gcs-server ignores ``ifGenerationMatch`` on resumable uploads, never fails a request, and finalizes an
upload when asked for its status, so the resumable protocol (resume from what GCS kept, 412 at the end,
cancel on failure) and resumed downloads are checked here, request by request; so are the requests the store
sends at all (only object requests) and listing page by page.
"""

from __future__ import annotations

import base64
import json
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import google_crc32c
import pytest

from cache_server.errors import StorageUnavailable
from cache_server.storage.gcs import MULTIPART_LIMIT, GcsBlobStore
from cache_server.storage.reading import open_many, open_sized
from tests.support.http_stub import Recorded, Reply, StubHttpServer, json_reply
from tests.support.memory import MIB

BUCKET = "proto-bucket"
CHUNK = MIB
_RANGE = re.compile(r"bytes (\*|(\d+)-(\d+))/(\*|\d+)")


@dataclass
class Session:
    name: str
    metadata: dict[str, str]
    data: bytearray = field(default_factory=bytearray)
    cancelled: bool = False


@dataclass
class FakeApi:
    """Just enough of the JSON API for one bucket. ``chunk_faults[n]`` scripts the n-th chunk PUT (from 1)."""

    url: str = ""
    objects: dict[str, tuple[bytes, dict[str, str], int]] = field(default_factory=dict)
    sessions: dict[str, Session] = field(default_factory=dict)
    chunk_faults: dict[int, Callable[[Session, bytes], Reply]] = field(default_factory=dict)
    final_status: int | None = None
    start_status: int | None = None
    media_replies: list[Callable[[bytes], Reply]] = field(default_factory=list)
    chunk_puts: int = 0
    page_size: int = 1000

    def __call__(self, request: Recorded) -> Reply:
        object_prefix = f"/storage/v1/b/{BUCKET}/o/"
        media_prefix = f"/download/storage/v1/b/{BUCKET}/o/"
        if request.method == "GET" and request.path == object_prefix.rstrip("/"):
            return self._list(request)
        if request.method == "GET" and request.path.startswith(object_prefix):
            return self._object(request.path[len(object_prefix) :])
        if request.method == "DELETE" and request.path.startswith(object_prefix):
            found = self.objects.pop(request.path[len(object_prefix) :], None)
            return (
                Reply(204)
                if found
                else json_reply(404, {"error": {"code": 404, "message": "No such object"}})
            )
        if request.method == "POST" and request.query.get("uploadType") == "multipart":
            return self._multipart(request)
        if request.method == "GET" and request.path.startswith(media_prefix):
            return self._media(request, request.path[len(media_prefix) :])
        if request.method == "POST" and request.query.get("uploadType") == "resumable":
            if self.start_status is not None:
                return json_reply(
                    self.start_status, {"error": {"code": self.start_status, "message": "scripted"}}
                )
            session_id = str(len(self.sessions) + 1)
            resource = json.loads(request.body)
            self.sessions[session_id] = Session(resource["name"], resource.get("metadata") or {})
            return Reply(200, {"Location": f"{self.url}/session/{session_id}"})
        if request.path.startswith("/session/"):
            session = self.sessions[request.path.rsplit("/", 1)[1]]
            if request.method == "DELETE":
                session.cancelled = True
                return Reply(499)
            return self._chunk(session, request)
        return json_reply(404, {"error": {"code": 404, "message": f"no route for {request.path}"}})

    def _object(self, name: str) -> Reply:
        if name not in self.objects:
            return json_reply(404, {"error": {"code": 404, "message": "No such object"}})
        data, metadata, generation = self.objects[name]
        resource = {
            "bucket": BUCKET,
            "name": name,
            "size": str(len(data)),
            "generation": str(generation),
            "timeCreated": "2026-01-02T03:04:05Z",
            "metadata": metadata,
        }
        return json_reply(200, resource)

    def _list(self, request: Recorded) -> Reply:
        names = sorted(n for n in self.objects if n.startswith(request.query.get("prefix", "")))
        start = int(request.query.get("pageToken", "0"))
        end = start + min(self.page_size, int(request.query.get("maxResults", self.page_size)))
        page: dict[str, object] = {"items": [json.loads(self._object(n).body) for n in names[start:end]]}
        if end < len(names):
            page["nextPageToken"] = str(end)
        return json_reply(200, page)

    def _multipart(self, request: Recorded) -> Reply:
        boundary = re.fullmatch(r"multipart/related; boundary=(\S+)", request.headers["content-type"])
        assert boundary, request.headers["content-type"]
        _, meta, media, end = request.body.split(b"--" + boundary.group(1).encode())
        assert end == b"--\r\n"
        resource = json.loads(meta.split(b"\r\n\r\n", 1)[1])
        data = media.split(b"\r\n\r\n", 1)[1].removesuffix(b"\r\n")
        if request.query["ifGenerationMatch"] == "0" and resource["name"] in self.objects:
            return json_reply(412, {"error": {"code": 412, "message": "exists"}})
        if base64.b64decode(resource["crc32c"]) != google_crc32c.value(data).to_bytes(4, "big"):
            return json_reply(400, {"error": {"code": 400, "message": "crc32c mismatch"}})
        self.objects[resource["name"]] = (data, resource.get("metadata") or {}, 1000 + len(self.objects))
        return self._object(resource["name"])

    def _media(self, request: Recorded, name: str) -> Reply:
        if name not in self.objects:
            return json_reply(404, {"error": {"code": 404, "message": "No such object"}})
        data, metadata, generation = self.objects[name]
        assert request.query.get("generation", str(generation)) == str(generation)  # pinned or live
        start = (
            int(request.headers["range"].removeprefix("bytes=").rstrip("-"))
            if "range" in request.headers
            else 0
        )
        if self.media_replies:
            return self.media_replies.pop(0)(data[start:])
        headers = {
            "X-Goog-Generation": str(generation),
            "Last-Modified": "Fri, 02 Jan 2026 03:04:05 GMT",
            **{f"X-Goog-Meta-{k}": v for k, v in metadata.items()},
        }
        return Reply(206 if start else 200, headers, data[start:])

    def _chunk(self, session: Session, request: Recorded) -> Reply:
        match = _RANGE.fullmatch(request.headers["content-range"])
        assert match, request.headers["content-range"]
        if match.group(1) == "*" and match.group(4) == "*":  # a status query
            return self._persisted(session)
        self.chunk_puts += 1
        start = int(match.group(2)) if match.group(2) else len(session.data)
        if start != len(session.data):
            return json_reply(
                400, {"error": {"code": 400, "message": f"expected offset {len(session.data)}"}}
            )
        fault = self.chunk_faults.get(self.chunk_puts)
        if fault is not None:
            return fault(session, request.body)
        session.data += request.body
        total = match.group(4)
        if total == "*" or int(total) != len(session.data):
            return self._persisted(session)
        if self.final_status is not None:
            return json_reply(
                self.final_status, {"error": {"code": self.final_status, "message": "scripted"}}
            )
        self.objects[session.name] = (bytes(session.data), session.metadata, 1000 + len(self.objects))
        return self._object(session.name)

    @staticmethod
    def _persisted(session: Session) -> Reply:
        headers = {"Range": f"bytes=0-{len(session.data) - 1}"} if session.data else {}
        return Reply(308, headers)


def keep_then(status: int, kept: int) -> Callable[[Session, bytes], Reply]:
    """A chunk PUT of which GCS keeps the first ``kept`` bytes and then answers ``status``."""

    def fault(session: Session, body: bytes) -> Reply:
        session.data += body[:kept]
        if status == 308:
            return FakeApi._persisted(session)
        return json_reply(status, {"error": {"code": status, "message": "scripted"}})

    return fault


@pytest.fixture
def api() -> Iterator[tuple[FakeApi, StubHttpServer, GcsBlobStore]]:
    fake = FakeApi()
    with StubHttpServer(fake) as stub:
        fake.url = stub.url
        store = GcsBlobStore(
            BUCKET, "pfx", endpoint=stub.url, retries=2, backoff=0.01, max_backoff=0.02, chunk_size=CHUNK
        )
        yield fake, stub, store
        store.close()


def body_of(size: int, seed: int = 3) -> bytes:
    return random.Random(seed).randbytes(size)


def in_pieces(data: bytes, size: int = 300_000) -> Iterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at : at + size]


def chunk_puts(stub: StubHttpServer) -> list[Recorded]:
    return [r for r in stub.requests if r.method == "PUT" and r.headers["content-range"] != "bytes */*"]


def test_resumable_upload_resumes_from_what_gcs_kept(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore],
) -> None:
    fake, stub, store = api
    data = body_of(MULTIPART_LIMIT + 2 * MIB + 12_345)
    fake.chunk_faults = {3: keep_then(503, 512 * 1024), 6: keep_then(308, 256 * 1024)}

    assert store.put("ns/k", in_pieces(data), {"sha256": "abc"}) is True

    stored, metadata, _ = fake.objects["pfx/ns/k"]
    assert stored == data
    assert metadata == {"sha256": "abc"}
    start = next(r for r in stub.requests if r.method == "POST")
    assert start.query["ifGenerationMatch"] == "0"
    assert [r for r in stub.requests if r.headers.get("content-range") == "bytes */*"], "asked what GCS kept"
    puts = chunk_puts(stub)
    assert all(len(r.body) % (256 * 1024) == 0 for r in puts[:-1])
    crc = google_crc32c.value(data).to_bytes(4, "big")
    assert puts[-1].headers["x-goog-hash"] == "crc32c=" + base64.b64encode(crc).decode()
    assert not any(r.method == "DELETE" for r in stub.requests)


@pytest.mark.parametrize("where", ["start", "second chunk", "last chunk"])
def test_412_means_false_after_draining(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore], where: str
) -> None:
    fake, _, store = api
    if where == "start":
        fake.start_status = 412
    elif where == "second chunk":
        fake.chunk_faults = {2: keep_then(412, 0)}
    else:
        fake.final_status = 412
    consumed = []

    def chunks() -> Iterator[bytes]:
        yield from in_pieces(body_of(MULTIPART_LIMIT + 3 * MIB))
        consumed.append(True)

    assert store.put("ns/k", chunks(), {}) is False
    assert consumed == [True]
    assert "pfx/ns/k" not in fake.objects


def test_an_existing_object_is_not_uploaded_again(api: tuple[FakeApi, StubHttpServer, GcsBlobStore]) -> None:
    fake, stub, store = api
    fake.objects["pfx/ns/k"] = (b"first", {}, 1)
    consumed = []

    def chunks() -> Iterator[bytes]:
        yield from in_pieces(body_of(MULTIPART_LIMIT + 3 * MIB))
        consumed.append(True)

    assert store.put("ns/k", chunks(), {}) is False
    assert consumed == [True]
    assert [r.method for r in stub.requests] == ["GET"]
    assert fake.objects["pfx/ns/k"][0] == b"first"


class Interrupted(Exception):
    pass


def test_a_failing_iterator_cancels_the_session_and_never_finalizes(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore],
) -> None:
    fake, stub, store = api

    def chunks() -> Iterator[bytes]:
        yield from in_pieces(body_of(MULTIPART_LIMIT + 3 * MIB + 5))
        raise Interrupted

    with pytest.raises(Interrupted):
        store.put("ns/k", chunks(), {})
    assert [s.cancelled for s in fake.sessions.values()] == [True]
    assert chunk_puts(stub), "the upload had started"
    assert all(r.headers["content-range"].endswith("/*") for r in chunk_puts(stub)), "no final chunk"
    assert fake.objects == {}


def test_a_small_body_sends_nothing_before_its_iterator_ends(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore],
) -> None:
    _, stub, store = api

    def chunks() -> Iterator[bytes]:
        yield b"x" * 100_000
        raise Interrupted

    with pytest.raises(Interrupted):
        store.put("ns/k", chunks(), {})
    assert stub.requests == []


def test_an_expired_session_is_unavailable_at_once(api: tuple[FakeApi, StubHttpServer, GcsBlobStore]) -> None:
    fake, stub, store = api
    fake.chunk_faults = {2: keep_then(404, 0)}
    with pytest.raises(StorageUnavailable, match=f"'{BUCKET}'.*HTTP 404"):
        store.put("ns/k", in_pieces(body_of(MULTIPART_LIMIT + MIB)), {})
    assert len(chunk_puts(stub)) == 2
    assert fake.objects == {}


def test_a_download_resumes_after_a_dropped_connection(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore],
) -> None:
    fake, stub, store = api
    data = body_of(5 * MIB + 7)
    fake.objects["pfx/ns/k"] = (data, {"a": "b"}, 42)
    cut = 1_500_007
    fake.media_replies = [lambda rest: Reply(200, {}, rest, cut_after=cut)]

    reader = store.open("ns/k")
    assert reader is not None
    with reader:
        assert reader.info.size == len(data)
        received = b"".join(reader.chunks())
    assert received == data
    gets = [r for r in stub.requests if r.path.startswith("/download/")]
    assert len(gets) == 2
    assert "range" not in gets[0].headers
    resumed_at = int(gets[1].headers["range"].removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= cut


def test_a_download_that_keeps_dropping_gives_up(api: tuple[FakeApi, StubHttpServer, GcsBlobStore]) -> None:
    fake, _, store = api
    fake.objects["pfx/ns/k"] = (body_of(3 * MIB), {}, 42)
    fake.media_replies = [lambda rest: Reply(200, {}, rest, cut_after=MIB)] + [
        lambda rest: Reply(206, {}, rest, cut_after=0) for _ in range(10)
    ]
    reader = store.open("ns/k")
    assert reader is not None
    with reader, pytest.raises(StorageUnavailable, match=f"read 'ns/k' from .*'{BUCKET}'.*3 attempts"):
        for _ in reader.chunks():
            pass


def test_a_blob_deleted_before_the_first_byte_is_a_miss(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore],
) -> None:
    fake, _, store = api
    fake.objects["pfx/ns/k"] = (b"bytes", {}, 42)
    fake.media_replies = [lambda rest: json_reply(404, {"error": {"code": 404, "message": "gone"}})]
    assert store.open("ns/k") is None


def test_a_blob_deleted_while_it_is_read_is_unavailable(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore],
) -> None:
    fake, _, store = api
    fake.objects["pfx/ns/k"] = (body_of(3 * MIB), {}, 42)
    fake.media_replies = [
        lambda rest: Reply(200, {}, rest, cut_after=MIB),
        lambda rest: json_reply(404, {"error": {"code": 404, "message": "gone"}}),
    ]
    reader = store.open("ns/k")
    assert reader is not None
    with reader, pytest.raises(StorageUnavailable, match="deleted while it was being read"):
        for _ in reader.chunks():
            pass


def test_only_object_requests_are_sent(api: tuple[FakeApi, StubHttpServer, GcsBlobStore]) -> None:
    """A role limited to objects (no ``storage.buckets.get``) must do: nothing asks for the bucket itself."""
    _, stub, store = api
    small, large = body_of(100_000), body_of(MULTIPART_LIMIT + MIB)
    assert store.put("ns/small", in_pieces(small), {"v": "1"}) is True
    assert store.put("ns/large", in_pieces(large), {"v": "2"}) is True
    assert store.put("ns/small", [b"again"], {}) is False
    for name, data in (("ns/small", small), ("ns/large", large)):
        reader = store.open(name)
        assert reader is not None
        with reader:
            assert b"".join(reader.chunks()) == data
    assert sorted(i.name for i in store.list()) == ["ns/large", "ns/small"]
    store.check()
    assert store.delete("ns/small") is True
    assert store.delete("ns/small") is False
    time.sleep(0.2)  # a background request, were one started, has arrived by now

    object_paths = tuple(
        f"/{kind}/b/{BUCKET}/o" for kind in ("storage/v1", "upload/storage/v1", "download/storage/v1")
    )
    assert [r.path for r in stub.requests if not r.path.startswith((*object_paths, "/session/"))] == []


def test_list_follows_the_pages(api: tuple[FakeApi, StubHttpServer, GcsBlobStore]) -> None:
    fake, stub, store = api
    fake.page_size = 2
    names = [f"ns/k{i}" for i in range(5)]
    for name in names:
        fake.objects[f"pfx/{name}"] = (name.encode(), {"n": name}, 1)
    fake.objects["pfx/ns/not a blob"] = (b"", {}, 1)
    fake.objects["elsewhere/ns/k9"] = (b"", {}, 1)

    listed = list(store.list())
    assert sorted(i.name for i in listed) == names
    assert all(dict(i.metadata) == {"n": i.name} and i.size == len(i.name) for i in listed)
    assert len([r for r in stub.requests if r.path == f"/storage/v1/b/{BUCKET}/o"]) == 3
    assert [i.name for i in store.list("ns/k3")] == ["ns/k3"]


def media_gets(stub: StubHttpServer) -> list[Recorded]:
    return [r for r in stub.requests if r.path.startswith(f"/download/storage/v1/b/{BUCKET}/o/")]


def metadata_gets(stub: StubHttpServer) -> list[Recorded]:
    return [r for r in stub.requests if r.method == "GET" and r.path.startswith(f"/storage/v1/b/{BUCKET}/o/")]


def test_a_bundle_reads_each_small_blob_in_one_request(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore],
) -> None:
    """open_many (the bundle's reads) sends one media GET per small blob and no metadata request; a missing
    blob is a None (the bundle leaves it out), not an error."""
    fake, stub, store = api
    names = [f"ns/k{i}" for i in range(40)]
    for i, name in enumerate(names):
        if i % 9 != 4:
            fake.objects[f"pfx/{name}"] = (body_of(1000 + i, seed=i), {"sha256": f"d{i}"}, 7 + i)
    readers = list(open_many(store, [(n, 1000 + i) for i, n in enumerate(names)], read_ahead=16))
    for i, reader in enumerate(readers):
        if i % 9 == 4:
            assert reader is None
            continue
        assert reader is not None
        with reader:
            assert b"".join(reader.chunks()) == body_of(1000 + i, seed=i)
            assert (reader.info.name, reader.info.size) == (names[i], 1000 + i)
            assert dict(reader.info.metadata) == {"sha256": f"d{i}"}
            assert reader.info.created.year == 2026
    assert len(media_gets(stub)) == len(names)
    assert metadata_gets(stub) == []
    assert all("generation" not in r.query for r in media_gets(stub))


def test_one_small_blob_is_read_in_one_request_and_a_large_one_opened(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore],
) -> None:
    """What a single GET of an entry reads with (``open_sized``, the index knowing the size): a small blob
    is one request for its bytes, no metadata request first; a large one is opened to be streamed."""
    fake, stub, store = api
    small, large = body_of(30_000, seed=1), body_of(2 * MIB, seed=2)
    fake.objects["pfx/ns/small"] = (small, {"sha256": "s"}, 7)
    fake.objects["pfx/ns/large"] = (large, {"sha256": "l"}, 8)
    reader = open_sized(store, "ns/small", len(small), MIB)
    assert reader is not None
    with reader:
        assert b"".join(reader.chunks()) == small
    assert (len(media_gets(stub)), len(metadata_gets(stub))) == (1, 0)
    reader = open_sized(store, "ns/large", len(large), MIB)
    assert reader is not None
    with reader:
        assert type(reader).__name__ == "GcsReader"
        assert b"".join(reader.chunks()) == large
    assert len(metadata_gets(stub)) == 1
    assert open_sized(store, "ns/absent", 10, MIB) is None


def test_a_whole_read_of_a_blob_over_its_limit_streams_it(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore],
) -> None:
    """A size hint that was wrong costs no memory: the bytes of a blob over the limit are not read whole."""
    fake, stub, store = api
    data = body_of(3 * MIB)
    fake.objects["pfx/ns/big"] = (data, {}, 42)
    reader = store.read_whole("ns/big", MIB)
    assert reader is not None
    with reader:
        assert type(reader).__name__ == "GcsReader"
        assert b"".join(reader.chunks()) == data
    assert [r.query.get("generation") for r in media_gets(stub)] == [None, "42"]  # then pinned, as open does
    # the generation and the size come from the first answer's headers: no metadata request
    assert len(metadata_gets(stub)) == 0


def test_a_whole_read_retries_transient_failures(api: tuple[FakeApi, StubHttpServer, GcsBlobStore]) -> None:
    fake, stub, store = api
    data = body_of(200_000)
    fake.objects["pfx/ns/k"] = (data, {}, 42)
    fake.media_replies = [
        lambda rest: json_reply(503, {"error": {"code": 503, "message": "busy"}}),
        lambda rest: Reply(200, {}, rest, cut_after=50_000),
    ]
    reader = store.read_whole("ns/k", MIB)
    assert reader is not None
    with reader:
        assert b"".join(reader.chunks()) == data
    assert len(media_gets(stub)) == 3


def test_a_whole_read_that_keeps_failing_is_unavailable(
    api: tuple[FakeApi, StubHttpServer, GcsBlobStore],
) -> None:
    fake, _, store = api
    fake.objects["pfx/ns/k"] = (b"x", {}, 42)
    fake.media_replies = [lambda rest: json_reply(503, {"error": {"code": 503, "message": "busy"}})] * 3
    with pytest.raises(StorageUnavailable, match=f"read 'ns/k' from .*'{BUCKET}'.*3 attempts.*HTTP 503"):
        store.read_whole("ns/k", MIB)
    fake.media_replies = [lambda rest: json_reply(403, {"error": {"code": 403, "message": "no"}})]
    with pytest.raises(StorageUnavailable, match="access was refused"):
        store.read_whole("ns/k", MIB)
