"""The BlobStore contract (cache_server/storage/base.py), checked on every backend unchanged."""

from __future__ import annotations

import datetime as dt
import functools
import gc
import hashlib
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import httpx
import pytest

from cache_server.errors import InvalidName
from cache_server.service.taken_names import unreadable
from cache_server.storage.abilities import (
    ABILITIES,
    PutsInBatches,
    ReadsAhead,
    ReadsWhole,
    SignsUrls,
    StoresPacks,
    SweepsTempFiles,
)
from cache_server.storage.base import BlobInfo, BlobReader, BlobStore
from cache_server.storage.batches import open_batch
from cache_server.storage.reading import open_many
from tests.support.api import sha
from tests.support.backends import Backend
from tests.support.memory import MIB, PeakRss
from tests.support.wait import wait_until

BIG = 512 * MIB
RSS_LIMIT = 64 * MIB
_BLOCK = random.Random(7).randbytes(MIB)  # allocated once, before any measurement


class Exhausted:
    """Wraps chunks and records whether the store consumed all of them."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = chunks
        self.done = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks
        self.done = True


class Interrupted(Exception):
    """What a checking iterator raises (a digest mismatch, a client gone)."""


def pieces(data: bytes, seed: int = 0) -> Iterator[bytes]:
    """``data`` in pieces of irregular sizes (empty to 3 MiB), as an upload arrives."""
    rng = random.Random(seed)
    at = 0
    while at < len(data):
        size = rng.choice([0, 1, 4096, 65_537, MIB, MIB + 1, 3 * MIB])
        yield data[at : at + size]
        at += size


def read_all(store: BlobStore, name: str) -> tuple[BlobInfo, bytes, list[int]]:
    reader = store.open(name)
    assert reader is not None
    with reader:
        sizes = []
        parts = []
        for chunk in reader.chunks():
            assert isinstance(chunk, bytes)
            sizes.append(len(chunk))
            parts.append(chunk)
        return reader.info, b"".join(parts), sizes


def numbered_blocks(count: int) -> Iterator[bytes]:
    """``count`` MiB, each block different (its number in front), made one at a time."""
    for i in range(count):
        yield i.to_bytes(8, "big") + _BLOCK[8:]


@pytest.mark.parametrize(
    "size",
    [0, 1, 256 * 1024 + 3, 9 * MIB + 5, 33 * MIB + 7],
    ids=["empty", "1B", "256KiB", "9MiB", "33MiB"],
)
def test_round_trip_keeps_bytes_metadata_and_size(backend: Backend, size: int) -> None:
    store = backend.store
    data = random.Random(size).randbytes(size)
    metadata = {"sha256": sha(data), "uploader": "host-7 / 🚀", "ms": "1234"}
    before = dt.datetime.now(dt.timezone.utc)
    assert store.put("ns1/key.1", pieces(data, size), metadata) is True
    after = dt.datetime.now(dt.timezone.utc)

    info = store.stat("ns1/key.1")
    assert info is not None
    assert (info.name, info.size, dict(info.metadata)) == ("ns1/key.1", size, metadata)
    assert info.created.tzinfo is not None
    assert before - dt.timedelta(seconds=5) <= info.created <= after + dt.timedelta(seconds=5)

    opened, body, chunk_sizes = read_all(store, "ns1/key.1")
    assert body == data
    assert opened == info
    assert all(0 < n <= 16 * MIB for n in chunk_sizes)


def test_backend_implements_the_protocol(backend: Backend) -> None:
    assert isinstance(backend.store, BlobStore)


def test_backend_declares_the_optional_abilities_it_has(backend: Backend) -> None:
    assert {ability for ability in ABILITIES if isinstance(backend.store, ability)} == backend.abilities


_CHECKS: dict[type, list[str]] = {}


def checks(ability: type) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Make a test the check of one optional ability: it runs on every backend that has the ability and is
    not collected for the others (conftest.py). Each ability of
    :data:`~cache_server.storage.abilities.ABILITIES` needs one."""

    def register(test: Callable[..., None]) -> Callable[..., None]:
        _CHECKS.setdefault(ability, []).append(test.__name__)

        @functools.wraps(test)
        def run(backend: Backend, **fixtures: object) -> None:
            assert ability in backend.abilities, f"the {backend.kind} store lacks {ability.__name__}"
            test(backend, **fixtures)

        run.checks_ability = ability  # type: ignore[attr-defined]
        return run

    return register


def test_every_optional_ability_has_a_check() -> None:
    assert {ability.__name__ for ability in _CHECKS} == {ability.__name__ for ability in ABILITIES}


@checks(ReadsWhole)
def test_a_whole_read_gives_the_bytes_held_or_streamed_over_the_limit(backend: Backend) -> None:
    store = backend.store
    assert isinstance(store, ReadsWhole)
    small, large = b"s" * 3000, random.Random(5).randbytes(2 * MIB + 3)
    assert store.put("ns/small", [small], {"sha256": "x"})
    assert store.put("ns/large", [large], {})
    assert store.put("ns/empty", [], {})
    reader = store.read_whole("ns/small", MIB)
    assert reader is not None
    with reader:
        assert b"".join(reader.chunks()) == small
        assert (reader.info.name, reader.info.size, dict(reader.info.metadata)) == (
            "ns/small",
            3000,
            {"sha256": "x"},
        )
    over = store.read_whole("ns/large", MIB)  # over the limit: opened and streamed instead
    assert over is not None
    with over:
        assert b"".join(over.chunks()) == large and over.info.size == len(large)
    empty = store.read_whole("ns/empty", MIB)
    assert empty is not None and b"".join(empty.chunks()) == b"" and empty.info.size == 0
    assert store.read_whole("ns/absent", MIB) is None


@checks(StoresPacks)
def test_packs_are_written_once_read_by_range_listed_apart_and_deleted(backend: Backend) -> None:
    store = backend.store
    assert isinstance(store, StoresPacks)
    assert isinstance(store.packs_by_default, bool)
    data = random.Random(3).randbytes(3 * MIB + 5)
    pack_id = "0123456789abcdef0123456789abcdef"
    store.put_pack(pack_id, [data[:MIB], data[MIB:]])
    assert store.put("ns/k", [b"a blob"], {}) is True

    assert store.read_pack(pack_id, 0, len(data)) == data
    assert store.read_pack(pack_id, MIB - 3, 10) == data[MIB - 3 : MIB + 7]
    assert store.read_pack(pack_id, len(data) - 4, 100) == data[-4:]  # fewer bytes: the pack is shorter
    assert store.read_pack(pack_id, len(data) + 10, 5) == b""
    assert store.read_pack("f" * 32, 0, 5) is None

    (info,) = store.list_packs()
    assert (info.name, info.size) == (pack_id, len(data))
    assert abs((info.created - dt.datetime.now(dt.timezone.utc)).total_seconds()) < 600
    assert [blob.name for blob in store.list()] == ["ns/k"]  # packs are not blobs

    with pytest.raises(ValueError, match="exists"):
        store.put_pack(pack_id, [b"other bytes"])
    assert store.read_pack(pack_id, 0, 8) == data[:8]  # the first stays

    for bad in ("../x", "ns/k", "0123456789ABCDEF0123456789ABCDEF", ""):
        with pytest.raises(InvalidName):
            store.read_pack(bad, 0, 1)
        with pytest.raises(InvalidName):
            store.put_pack(bad, [b"x"])
    assert store.delete_pack(pack_id) is True
    assert store.delete_pack(pack_id) is False
    assert list(store.list_packs()) == []
    assert store.read_pack(pack_id, 0, 5) is None


@checks(SweepsTempFiles)
def test_a_sweep_removes_only_temp_files_older_than_the_grace_period(backend: Backend) -> None:
    store = backend.store
    assert isinstance(store, SweepsTempFiles)
    assert backend.abandon_upload is not None
    assert store.put("ns/k", [b"kept"], {}) is True
    backend.abandon_upload(2 * 3600)  # died two hours ago
    backend.abandon_upload(60)  # a minute ago: may be an upload that is only slow
    assert len(backend.stored_files()) == 3

    assert store.remove_stale_temp_files(older_than_seconds=3600) == 1
    assert len(backend.stored_files()) == 2
    assert store.remove_stale_temp_files(older_than_seconds=3600) == 0
    assert store.remove_stale_temp_files(older_than_seconds=30) == 1
    assert backend.stored_files() == ["ns/k"]
    assert read_all(store, "ns/k")[1] == b"kept"


@checks(SignsUrls)
def test_signed_urls_download_the_blobs_named_and_bad_requests_are_refused(backend: Backend) -> None:
    store = backend.store
    assert isinstance(store, SignsUrls)
    blobs = {"ns/a": b"first blob", "ns/b": random.Random(2).randbytes(70_000)}
    for name, data in blobs.items():
        assert store.put(name, [data], {}) is True
    for bad in ("../escape", "ns/a/b", "ns/", "n s/k"):  # refused whether or not the store can sign
        with pytest.raises(InvalidName):
            store.signed_url(bad, 60)
        with pytest.raises(InvalidName):
            store.signed_urls(["ns/a", bad], 60)
    for expiry in (0, -60):
        with pytest.raises(ValueError):
            store.signed_url("ns/a", expiry)
        with pytest.raises(ValueError):
            store.signed_urls(["ns/a"], expiry)
    # Credentials that cannot sign give None from both, never a URL that does not work.
    assert (store.signed_url("ns/a", 60) is None) == (store.signed_urls(["ns/a"], 60) is None)

    signer = backend.signing() if backend.signing is not None else store
    url = signer.signed_url("ns/a", 60)
    assert url is not None
    assert httpx.get(url).content == blobs["ns/a"]
    urls = signer.signed_urls(["ns/b", "ns/a", "ns/b"], 60)
    assert urls is not None and sorted(urls) == ["ns/a", "ns/b"]
    for name, data in blobs.items():
        response = httpx.get(urls[name])
        assert (response.status_code, response.content) == (200, data)
    absent = signer.signed_url("ns/absent", 60)  # made without asking the store: the download says 404
    assert absent is not None and httpx.get(absent).status_code == 404


@checks(PutsInBatches)
def test_a_batch_of_the_stores_own_makes_blobs_durable_at_commit(backend: Backend) -> None:
    store = backend.store
    assert isinstance(store, PutsInBatches)
    assert store.put("ns/old", [b"first"], {}) is True
    with store.batch() as batch, store.batch() as other:
        batch.put("ns/a", pieces(b"a" * 300_000), {"v": "a"})
        batch.put("ns/old", [b"second"], {})
        assert other.commit() == {}  # each batch is new and empty: nothing of another's
        assert batch.commit() == {"ns/a": True, "ns/old": False}
        info, data, _ = read_all(store, "ns/a")  # visible once committed
        assert (data, dict(info.metadata)) == (b"a" * 300_000, {"v": "a"})
        assert read_all(store, "ns/old")[1] == b"first"
        assert batch.commit() == {}  # then empty again
        batch.put("ns/b", [b"b"], {})
        assert batch.commit() == {"ns/b": True}
    assert sorted(i.name for i in store.list()) == ["ns/a", "ns/b", "ns/old"]
    assert len(backend.stored_files()) == 3


@checks(ReadsAhead)
def test_open_many_reads_ahead_as_far_as_the_store_says(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = backend.store
    assert isinstance(store, ReadsAhead)
    assert isinstance(store.read_ahead, int) and isinstance(store.read_ahead_bytes, int)
    assert store.read_ahead > 1 and store.read_ahead_bytes >= MIB
    count = store.read_ahead + 3
    names = [f"ns/k{i}" for i in range(count)]
    for i, name in enumerate(names):
        if i != 2:  # one missing
            assert store.put(name, [b"%d" % i * 500], {}) is True
    asked: list[str] = []  # the names read, as the reads start
    opened = store.open

    def open_recorded(name: str) -> BlobReader | None:
        asked.append(name)
        return opened(name)

    monkeypatch.setattr(store, "open", open_recorded)
    if isinstance(store, ReadsWhole):
        whole = store.read_whole

        def whole_recorded(name: str, limit: int) -> BlobReader | None:
            asked.append(name)
            return whole(name, limit)

        monkeypatch.setattr(store, "read_whole", whole_recorded)

    readers = open_many(store, [(name, 500 * len(str(i))) for i, name in enumerate(names)])  # the store's own
    first = next(readers)
    assert first is not None
    first.close()
    # The blobs that follow are read before their turn, as many as the store reads ahead.
    wait_until(lambda: len(asked) >= store.read_ahead, message=lambda: f"read only {asked}")
    assert set(asked) <= set(names[: store.read_ahead + 1])
    rest = list(readers)
    assert [reader is None for reader in rest] == [i == 2 for i in range(1, count)]
    for i, reader in enumerate(rest, start=1):
        if reader is not None:
            with reader:
                assert b"".join(reader.chunks()) == b"%d" % i * 500
    assert set(asked) == set(names)


def test_a_readers_identity_names_the_stored_bytes_as_they_are(backend: Backend) -> None:
    """Where a backend names what a reader reads (``identity``), it names it the same way on every read,
    however it is read, and differently once the blob has been replaced or stored anew."""
    store = backend.store

    def identity(reader: BlobReader | None) -> object:
        assert reader is not None
        with reader:
            b"".join(reader.chunks())
            return reader.identity

    assert store.put("ns/k", [b"first"], {}) is True
    seen = [identity(store.open("ns/k")), identity(store.open("ns/k"))]
    seen += [identity(reader) for reader in open_many(store, [("ns/k", 5)], read_ahead=2)]
    if isinstance(store, ReadsWhole):
        seen.append(identity(store.read_whole("ns/k", MIB)))
    if seen[0] is None:
        assert seen == [None] * len(seen), "a backend names every reader's bytes or none"
        return
    hash(seen[0])
    assert seen == [seen[0]] * len(seen)
    assert store.put("ns/k", [b"second, longer"], {}, replace=lambda info: True) is True
    replaced = identity(store.open("ns/k"))
    assert replaced not in (None, seen[0])
    assert store.delete("ns/k") is True
    assert store.put("ns/k", [b"third and longer still"], {}) is True
    assert identity(store.open("ns/k")) not in (None, seen[0], replaced)


def test_empty_metadata_round_trips(backend: Backend) -> None:
    assert backend.store.put("ns/k", [b"x"], {}) is True
    info = backend.store.stat("ns/k")
    assert info is not None and dict(info.metadata) == {}


def test_a_miss_is_not_an_error(backend: Backend) -> None:
    store = backend.store
    assert store.open("ns/absent") is None
    assert store.stat("ns/absent") is None
    assert store.delete("ns/absent") is False
    assert list(store.list()) == []
    store.check()


def test_second_put_of_a_name_returns_false_and_the_first_stays(backend: Backend) -> None:
    store = backend.store
    assert store.put("ns/k", [b"first ", b"bytes"], {"who": "first"}) is True
    second = Exhausted([b"second", b" and longer bytes"])
    assert store.put("ns/k", second, {"who": "second"}) is False
    assert second.done, "the chunks of a refused put are still consumed"
    info, body, _ = read_all(store, "ns/k")
    assert body == b"first bytes"
    assert (info.size, dict(info.metadata)) == (11, {"who": "first"})


def test_refused_put_still_lets_a_checking_iterator_raise(backend: Backend) -> None:
    store = backend.store
    assert store.put("ns/k", [b"original"], {}) is True

    def checking() -> Iterator[bytes]:
        yield b"other bytes"
        raise Interrupted("digest mismatch")

    with pytest.raises(Interrupted):
        store.put("ns/k", checking(), {})
    assert read_all(store, "ns/k")[1] == b"original"


def test_large_second_put_is_refused_and_the_first_stays(backend: Backend) -> None:
    store = backend.store
    first = random.Random(1).randbytes(20 * MIB)
    assert store.put("ns/big", pieces(first), {"who": "first"}) is True
    second = Exhausted(numbered_blocks(20))
    assert store.put("ns/big", second, {"who": "second"}) is False
    assert second.done
    info, body, _ = read_all(store, "ns/big")
    assert body == first and dict(info.metadata) == {"who": "first"}


def test_sixteen_concurrent_puts_of_one_name_have_one_winner(backend: Backend) -> None:
    store = backend.store
    writers = 16
    bodies = [bytes([i]) * (300 * 1024) + f"writer {i}".encode() for i in range(writers)]
    results: list[bool | None] = [None] * writers
    consumed = [Exhausted(pieces(body, i)) for i, body in enumerate(bodies)]
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def write(i: int) -> None:
        try:
            start.wait()
            results[i] = store.put("ns/contested", consumed[i], {"writer": str(i)})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(results, key=bool) == [False] * (writers - 1) + [True]
    assert all(c.done for c in consumed)
    winner = results.index(True)
    info, body, _ = read_all(store, "ns/contested")
    assert body == bodies[winner]
    assert dict(info.metadata) == {"writer": str(winner)}
    assert [i.name for i in store.list()] == ["ns/contested"]


def test_many_threads_store_and_read_different_names(backend: Backend) -> None:
    store = backend.store
    bodies = {f"ns{i % 3}/key-{i}": random.Random(i).randbytes(50_000 + i) for i in range(24)}
    errors: list[BaseException] = []

    def work(name: str, data: bytes) -> None:
        try:
            assert store.put(name, pieces(data), {"n": name}) is True
            assert read_all(store, name)[1] == data
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=item) for item in bodies.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(i.name for i in store.list()) == sorted(bodies)


def test_delete_removes_the_blob_and_frees_the_name(backend: Backend) -> None:
    store = backend.store
    assert store.put("ns/k", [b"old"], {"v": "1"}) is True
    assert store.delete("ns/k") is True
    assert store.stat("ns/k") is None
    assert store.open("ns/k") is None
    assert list(store.list()) == []
    assert store.delete("ns/k") is False
    assert store.put("ns/k", [b"new bytes"], {"v": "2"}) is True
    info, body, _ = read_all(store, "ns/k")
    assert (body, dict(info.metadata)) == (b"new bytes", {"v": "2"})


def test_list_yields_every_blob_under_a_prefix(backend: Backend) -> None:
    store = backend.store
    names = ["ns1/a", "ns1/b.2", "ns10/a", "ns2/a", "other/zz"]
    for n, name in enumerate(names):
        assert store.put(name, [b"x" * n], {"name": name}) is True

    everything = {info.name: info for info in store.list()}
    assert sorted(everything) == names
    for name, info in everything.items():
        assert info == store.stat(name)
        assert info.size == names.index(name)
    assert sorted(i.name for i in store.list("ns1/")) == ["ns1/a", "ns1/b.2"]
    assert sorted(i.name for i in store.list("ns1")) == ["ns1/a", "ns1/b.2", "ns10/a"]
    assert sorted(i.name for i in store.list("ns1/b")) == ["ns1/b.2"]
    assert list(store.list("nothing")) == []


def test_list_skips_what_is_not_a_blob(backend: Backend) -> None:
    """Blob roots are shared with others: an NFS ``.nfs*`` file, ``lost+found``, a note someone left."""
    store = backend.store
    assert store.put("ns/real", [b"blob"], {}) is True
    for foreign in ["README", "ns/.nfs0000000012345", "lost+found/x", "ns/sub/deeper", "ns/has space"]:
        backend.plant(foreign, b"not a blob")
    assert [i.name for i in store.list()] == ["ns/real"]
    assert [i.name for i in store.list("ns/")] == ["ns/real"]
    assert store.stat("ns/real") is not None


@pytest.mark.parametrize("sent", [100 * 1024, 40 * MIB], ids=["small", "large"])
def test_interrupted_upload_leaves_nothing(backend: Backend, sent: int) -> None:
    store = backend.store
    failure = Interrupted("client went away")

    def upload() -> Iterator[bytes]:
        yield from numbered_blocks(sent // MIB)
        yield b"z" * (sent % MIB)
        raise failure

    with pytest.raises(Interrupted) as caught:
        store.put("ns/partial", upload(), {"v": "1"})
    assert caught.value is failure
    gc.collect()  # an abandoned upload object must not finish the upload when it is collected
    time.sleep(0.2)  # part of the test: a finish started by the collection would have landed by now
    assert store.stat("ns/partial") is None
    assert store.open("ns/partial") is None
    assert list(store.list()) == []
    assert backend.stored_files() == []
    assert store.put("ns/partial", [b"complete"], {"v": "2"}) is True
    assert read_all(store, "ns/partial")[1] == b"complete"


def test_invalid_names_are_refused_before_anything_is_stored(backend: Backend) -> None:
    store = backend.store
    for name in ["../escape", "ns/../x", "ns/a/b", "/ns/k", "ns/", "ns", "ns/k\x00", "n s/k"]:
        with pytest.raises(InvalidName):
            store.put(name, [b"x"], {})
        with pytest.raises(InvalidName):
            store.stat(name)
        with pytest.raises(InvalidName):
            store.open(name)
        with pytest.raises(InvalidName):
            store.delete(name)
    assert backend.stored_files() == []


def test_a_reader_closed_early_releases_its_blob(backend: Backend) -> None:
    store = backend.store
    assert store.put("ns/k", numbered_blocks(3), {}) is True
    for _ in range(20):
        reader = store.open("ns/k")
        assert reader is not None
        chunks = reader.chunks()
        assert next(chunks)
        reader.close()
    assert read_all(store, "ns/k")[1] == b"".join(numbered_blocks(3))


@pytest.mark.slow
def test_512_mib_streams_both_ways_in_bounded_memory(
    backend: Backend, record_property: Callable[[str, object], None]
) -> None:
    store = backend.store
    sent = hashlib.sha256()

    def body() -> Iterator[bytes]:
        for block in numbered_blocks(BIG // MIB):
            sent.update(block)
            yield block

    started = time.perf_counter()
    with PeakRss() as upload:
        assert store.put("ns/huge", body(), {"sha256": "later"}) is True
    upload_seconds = time.perf_counter() - started
    info = store.stat("ns/huge")
    assert info is not None and info.size == BIG

    received = hashlib.sha256()
    count = 0
    started = time.perf_counter()
    with PeakRss() as download:
        reader = store.open("ns/huge")
        assert reader is not None
        with reader:
            for chunk in reader.chunks():
                received.update(chunk)
                count += len(chunk)
    download_seconds = time.perf_counter() - started

    report = (
        f"{backend.kind}: 512 MiB up {upload_seconds:.1f} s ({BIG / MIB / upload_seconds:.0f} MiB/s), "
        f"peak RSS +{upload.growth / MIB:.1f} MiB [{upload.method}]; down {download_seconds:.1f} s "
        f"({BIG / MIB / download_seconds:.0f} MiB/s), peak RSS +{download.growth / MIB:.1f} MiB"
    )
    print(report)
    record_property("transfer", report)
    assert count == BIG
    assert received.hexdigest() == sent.hexdigest()
    assert upload.growth < RSS_LIMIT, report
    assert download.growth < RSS_LIMIT, report
    assert store.delete("ns/huge") is True


def test_a_batch_commits_create_only_and_reports_each_blob(backend: Backend) -> None:
    store = backend.store
    assert store.put("ns/old", [b"first"], {"v": "1"}) is True
    with open_batch(store) as batch:
        for i in range(40):
            batch.put(f"ns/k{i}", pieces(b"%d" % i * 1000, seed=i), {"i": str(i)})
        batch.put("ns/old", [b"second"], {"v": "2"})
        batch.put("ns/k0", [b"again in the same batch"], {})
        done = batch.commit()
    assert done == {**{f"ns/k{i}": True for i in range(40)}, "ns/old": False}
    for i in range(40):
        info, data, _ = read_all(store, f"ns/k{i}")
        assert data == b"%d" % i * 1000 and info.metadata == {"i": str(i)}
    assert read_all(store, "ns/old")[1] == b"first"
    assert sorted(i.name for i in store.list()) == sorted(["ns/old", *(f"ns/k{i}" for i in range(40))])
    assert len(backend.stored_files()) == 41  # and nothing else: no temp file


def test_a_failing_blob_in_a_batch_leaves_nothing_and_the_batch_goes_on(backend: Backend) -> None:
    store = backend.store

    def broken() -> Iterator[bytes]:
        yield b"half"
        raise Interrupted("digest mismatch")

    with open_batch(store) as batch:
        batch.put("ns/a", [b"a"], {})
        with pytest.raises(Interrupted):
            batch.put("ns/bad", broken(), {})
        batch.put("ns/b", [b"b"], {})
        assert batch.commit() == {"ns/a": True, "ns/b": True}
    assert store.stat("ns/bad") is None
    assert sorted(i.name for i in store.list()) == ["ns/a", "ns/b"]
    assert len(backend.stored_files()) == 2


def test_an_aborted_batch_leaves_no_temp_file(backend: Backend) -> None:
    store = backend.store
    with open_batch(store) as batch:
        batch.put("ns/never", [b"x" * 1000], {})
        batch.abort()
    # A store whose batch writes as it goes may keep the blob (the index never names it: gc's orphan);
    # one that defers to the commit keeps nothing. No temp file either way.
    assert [i.name for i in store.list()] in ([], ["ns/never"])
    assert len(backend.stored_files()) <= 1
    assert store.put("ns/after", [b"y"], {}) is True


@pytest.mark.parametrize("read_ahead", [0, 8])
def test_open_many_gives_each_blob_in_order(backend: Backend, read_ahead: int) -> None:
    store = backend.store
    names = [f"ns/k{i}" for i in range(30)]
    for i, name in enumerate(names):
        if i % 7 != 3:
            assert store.put(name, [b"%d" % i * (100 if i != 20 else 300_000)], {}) is True
    readers = list(open_many(store, [(n, 1000) for n in names], read_ahead=read_ahead, small=100_000))
    for i, reader in enumerate(readers):
        if i % 7 == 3:
            assert reader is None
            continue
        assert reader is not None
        with reader:
            assert b"".join(reader.chunks()) == b"%d" % i * (100 if i != 20 else 300_000)


def test_open_many_reads_ahead_on_threads() -> None:
    """A store whose every open waits until another open is running: only reads in flight together end."""

    class Slow:
        def __init__(self) -> None:
            self.running = 0
            self.most = 0
            self.lock = threading.Lock()

        def open(self, name: str) -> None:
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            time.sleep(0.05)  # the slow open itself, on purpose: opens in flight together overlap
            with self.lock:
                self.running -= 1

    slow = Slow()
    assert list(open_many(slow, [(f"ns/k{i}", 10) for i in range(24)], read_ahead=8)) == [None] * 24  # type: ignore[arg-type]
    assert slow.most >= 4


def _metadata(data: bytes) -> dict[str, str]:
    return {"sha256": sha(data)}


def test_a_damaged_blob_is_reported_never_raised_and_can_be_replaced_or_set_aside(backend: Backend) -> None:
    store = backend.store
    assert backend.damage is not None
    assert store.put("ns/good", [b"fine"], _metadata(b"fine")) is True
    assert store.put("ns/bad", [b"old bytes"], _metadata(b"old bytes")) is True
    backend.damage("ns/bad")

    listed = {info.name: info for info in store.list()}
    assert sorted(listed) == ["ns/bad", "ns/good"]
    assert unreadable(listed["ns/good"]) is None
    assert unreadable(listed["ns/bad"]) is not None
    stat = store.stat("ns/bad")
    assert stat is not None and unreadable(stat) is not None
    reader = store.open("ns/bad")  # never raises: a miss, or (GCS: only the metadata is garbled) the bytes
    if reader is not None:
        reader.close()
    if backend.kind == "local":
        assert stat.damaged is not None and reader is None

    assert store.put("ns/bad", [b"new"], _metadata(b"new")) is False  # create-only: left as it is
    damaged = lambda info: unreadable(info) is not None  # noqa: E731
    assert store.put("ns/bad", [b"new"], _metadata(b"new"), replace=damaged) is True
    info, body, _ = read_all(store, "ns/bad")
    assert (body, unreadable(info), info.metadata) == (b"new", None, _metadata(b"new"))

    backend.damage("ns/bad")
    assert store.set_aside("ns/bad") is True
    assert store.stat("ns/bad") is None
    assert [info.name for info in store.list()] == ["ns/good"]
    assert store.put("ns/bad", [b"again"], _metadata(b"again")) is True


def test_a_replacing_put_swaps_exactly_the_blob_it_judged(backend: Backend) -> None:
    store = backend.store
    assert store.put("ns/k", [b"A"], {"v": "A"}, replace=lambda info: True) is True  # a free name: created
    assert store.put("ns/k", [b"B"], {"v": "B"}, replace=lambda info: False) is False
    assert read_all(store, "ns/k")[1] == b"A"
    seen: list[str] = []

    def judge(info: BlobInfo) -> bool:
        seen.append(info.metadata["v"])
        return info.metadata["v"] == "A"

    assert store.put("ns/k", [b"B"], {"v": "B"}, replace=judge) is True
    assert read_all(store, "ns/k")[1] == b"B" and set(seen) == {"A"}

    # Eight replacers of one blob at once: exactly one wins, and the store holds the winner's bytes.
    start = threading.Barrier(8)
    outcomes: dict[int, bool] = {}

    def replace(n: int) -> None:
        start.wait()
        outcomes[n] = store.put(
            "ns/k", [f"C{n}".encode()], {"v": f"C{n}"}, replace=lambda info: info.metadata["v"] == "B"
        )

    threads = [threading.Thread(target=replace, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [n for n, won in outcomes.items() if won]
    assert len(winners) == 1, outcomes
    assert read_all(store, "ns/k")[1] == f"C{winners[0]}".encode()


def test_a_batch_replaces_what_its_judge_wants_replaced(backend: Backend) -> None:
    store = backend.store
    assert store.put("ns/stale", [b"old"], {"v": "old"}) is True
    assert store.put("ns/kept", [b"old"], {"v": "old"}) is True
    with open_batch(store) as batch:
        batch.put("ns/stale", [b"new"], {"v": "new"}, replace=lambda info: True)
        batch.put("ns/kept", [b"new"], {"v": "new"}, replace=lambda info: False)
        batch.put("ns/fresh", [b"new"], {"v": "new"}, replace=lambda info: True)
        assert batch.commit() == {"ns/stale": True, "ns/kept": False, "ns/fresh": True}
    assert [read_all(store, f"ns/{k}")[1] for k in ("stale", "kept", "fresh")] == [b"new", b"old", b"new"]
