"""The storage protocol every blob backend implements, and its contract.

A blob is an immutable byte string stored under a name ``"<namespace>/<key>"`` (both parts already
validated by :mod:`cache_server.names`), with a small string-to-string metadata map written together with
the bytes. The contract, which ``tests/storage`` checks against every backend unchanged:

* **Safe for concurrent use** from many threads (and, for shared backends, many processes and hosts).
* **Create-only.** :meth:`BlobStore.put` never replaces a blob. Of several concurrent puts of one name
  exactly one returns ``True``; the others return ``False`` and leave the winner untouched.
* **All or nothing.** A blob becomes visible to :meth:`open`, :meth:`stat` and :meth:`list` only once its
  bytes and metadata are complete and durable. If the ``chunks`` iterator raises (digest mismatch, size
  limit, client gone), ``put`` re-raises it and nothing is visible, no temporary file is left behind.
* **Streaming.** Neither ``put`` nor ``open`` holds a whole blob in memory.
* **A miss is not an error.** ``open`` and ``stat`` return ``None`` for a name that is not stored;
  ``delete`` returns ``False``.
* **Damage is reported, never raised.** A blob whose stored record cannot be read (a damaged byte in a
  local blob's header, a foreign file or a directory at a blob's name) is still listed by :meth:`list` and
  given by :meth:`stat`, with :attr:`BlobInfo.damaged` saying why (its size and time as far as they are
  known, no metadata); :meth:`open` treats it as a miss (``None``), and a whole read gives a miss or,
  where only the metadata is unreadable, the bytes (whose caller checks them against the index). ``put``
  with a ``replace`` judge may replace it; :meth:`BlobStore.set_aside` moves it out of the way.
* **Replacing is a compare-and-swap.** ``put(..., replace=judge)`` on a taken name calls ``judge`` with the
  stored blob's info (``damaged`` set if unreadable) and, if it answers True, swaps the new blob in for
  exactly the blob judged: of several replacers of one blob exactly one succeeds; the others get ``False``
  (and see the winner's blob). Without ``replace`` a put is create-only as above.
* **Plain errors.** Vendor errors are translated at the backend's edge: a backend that cannot reach its
  service (after retrying what is worth retrying) raises :class:`~cache_server.errors.StorageUnavailable`.

Some abilities only some backends have; each is a protocol of its own (:data:`ABILITIES`), methods and
attributes typed, so callers ask ``isinstance(store, SignsUrls)`` rather than probing for attributes:
:class:`SignsUrls` (direct downloads that bypass the server), :class:`SweepsTempFiles` (cleaning up after
uploads that died), :class:`PutsInBatches` (many blobs made durable together: one sync for a batch instead
of one per blob), :class:`ReadsWhole` (a small blob read in one round trip, not an open and a read),
:class:`ReadsAhead` (how many reads of small blobs overlap) and :class:`StoresPacks` (packs: copies of many
small blobs in one object, read by byte range). A reader's :attr:`BlobReader.identity` is required but may
be ``None``. :func:`open_batch` gives a :class:`BlobBatch` for any store; :func:`open_many` reads many blobs
in order, the next small ones meanwhile. How to add a backend: :mod:`cache_server.storage`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cache_server.errors import InvalidName
from cache_server.names import check_key, check_namespace

__all__ = [
    "ABILITIES",
    "DAMAGED_DIR",
    "MIB",
    "PACK_DIR",
    "READ_CHUNK",
    "BlobBatch",
    "BlobInfo",
    "BlobReader",
    "BlobStore",
    "ConcurrentBatch",
    "HeldReader",
    "PutsInBatches",
    "ReadsAhead",
    "ReadsWhole",
    "ReplaceJudge",
    "SequentialBatch",
    "SignsUrls",
    "StoresPacks",
    "SweepsTempFiles",
    "blob_name",
    "check_pack_id",
    "open_batch",
    "open_many",
    "open_sized",
    "parse_blob_name",
    "split_blob_name",
]

MIB = 1024 * 1024
READ_CHUNK = MIB
"""The most bytes one piece yielded by :meth:`BlobReader.chunks` holds, in every backend here."""
PACK_DIR = ".packs"
"""Where a store keeps its packs, beside the namespaces (no namespace starts with a dot)."""
DAMAGED_DIR = ".damaged"
"""Where a local store moves the blobs :meth:`BlobStore.set_aside` is asked to (kept for inspection)."""
_PACK_ID = re.compile(r"[0-9a-f]{32}")


def check_pack_id(pack_id: str) -> str:
    """``pack_id`` if it is a pack's name (32 lowercase hex digits, a random UUID's), else InvalidName."""
    if not _PACK_ID.fullmatch(pack_id):
        raise InvalidName(f"{pack_id!r} is not a pack id (32 lowercase hex digits).")
    return pack_id


@dataclass(frozen=True)
class BlobInfo:
    """What a store knows about one stored blob."""

    name: str
    size: int
    created: dt.datetime
    metadata: Mapping[str, str] = field(default_factory=dict)
    damaged: str | None = None
    """Why the blob's stored record (header, metadata) cannot be read; ``None`` for a sound blob."""


ReplaceJudge = Callable[[BlobInfo], bool]
"""Asked by ``put(..., replace=...)`` about the blob already stored under the name: True to replace it."""


class BlobReader(AbstractContextManager["BlobReader"], Protocol):
    """An open blob: its info and an iterator over its bytes. Close it (or use ``with``) when done."""

    @property
    def info(self) -> BlobInfo:
        """What the store knows about the blob."""
        ...

    @property
    def identity(self) -> Hashable | None:
        """What names the very stored bytes this reader reads, as they are now (a local file's device, inode,
        size and change times): it changes whenever they could have changed, so the service streams a blob
        it has already hashed whole unhashed until then (only its length checked). ``None`` where the backend
        cannot tell (every blob is then hashed as it is read)."""
        ...

    def chunks(self) -> Iterator[bytes]:
        """Yield the blob's bytes in order, in chunks of a bounded size."""
        ...

    def close(self) -> None:
        """Release the underlying file or connection."""
        ...


@runtime_checkable
class BlobStore(Protocol):
    """A place to keep immutable blobs. See the module docstring for the contract."""

    def put(
        self,
        name: str,
        chunks: Iterable[bytes],
        metadata: Mapping[str, str],
        *,
        replace: ReplaceJudge | None = None,
    ) -> bool:
        """Store ``chunks`` under ``name`` unless it exists. True: created; False: it was already there.

        When the name already exists the chunks are still consumed (so a checking iterator can raise),
        but nothing is written, unless ``replace`` judges the stored blob (see the module docstring) and
        answers True: then the new blob takes its place, atomically, and put returns True.
        """
        ...

    def open(self, name: str) -> BlobReader | None:
        """Open a blob for streaming, or ``None`` on a miss."""
        ...

    def stat(self, name: str) -> BlobInfo | None:
        """The blob's info, or ``None`` on a miss."""
        ...

    def delete(self, name: str) -> bool:
        """Remove a blob. True if it was there."""
        ...

    def set_aside(self, name: str) -> bool:
        """Take a damaged blob out of the store's names: a local store moves it into :data:`DAMAGED_DIR`
        (kept for inspection, never listed), GCS deletes the object. True if something was there."""
        ...

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        """Every stored blob whose name starts with ``prefix``, in no particular order (a damaged one too,
        with ``damaged`` set; what is not a blob at all, such as a directory, is left out)."""
        ...

    def check(self) -> None:
        """Raise :class:`~cache_server.errors.StorageUnavailable` unless the store is reachable."""
        ...

    def close(self) -> None:
        """Release clients and pools."""
        ...


def blob_name(namespace: str, key: str) -> str:
    """The blob name of an entry. Both parts must already be validated."""
    return f"{namespace}/{key}"


def split_blob_name(name: str) -> tuple[str, str]:
    """Inverse of :func:`blob_name`."""
    namespace, _, key = name.partition("/")
    return namespace, key


def parse_blob_name(name: str) -> tuple[str, str]:
    """:func:`split_blob_name` for a name from outside, which a backend is about to build a path or an
    object name from: raises :class:`~cache_server.errors.InvalidName` unless both parts are valid.
    """
    namespace, key = split_blob_name(name)
    return check_namespace(namespace), check_key(key)


@runtime_checkable
class SignsUrls(Protocol):
    """A store that can hand out URLs from which anyone may download a blob directly, for a while."""

    def signed_url(self, name: str, expires_seconds: int) -> str | None:
        """A URL that lets its holder GET the bytes of blob ``name`` for ``expires_seconds``.

        Returns ``None`` when the store's credentials cannot sign (the caller then serves the bytes itself).
        The URL is made without checking that the blob exists. Raises
        :class:`~cache_server.errors.InvalidName` for a bad name, :class:`ValueError` for an expiry the
        backend does not allow, and :class:`~cache_server.errors.StorageUnavailable` if signing needed a
        service that failed.
        """
        ...

    def signed_urls(self, names: Sequence[str], expires_seconds: int) -> dict[str, str] | None:
        """:meth:`signed_url` for each of ``names`` (by name), as fast as the backend can (several
        signing calls at once, where signing is remote); ``None`` when the credentials cannot sign."""
        ...


@runtime_checkable
class SweepsTempFiles(Protocol):
    """A store that keeps uploads in progress as temp files, which a process that dies leaves behind."""

    def remove_stale_temp_files(self, older_than_seconds: float) -> int:
        """Delete the temp files not touched for more than ``older_than_seconds``; return how many.

        Files younger than that are left alone. An upload in progress keeps its file young by writing to it,
        so a grace period longer than any pause within an upload never removes a live one. Safe to run while
        other threads and processes use the store.
        """
        ...


class BlobBatch(Protocol):
    """Many puts whose cost is paid together: durable and reported at :meth:`commit`.

    A blob may become visible before the commit (a store without a batch of its own puts at once), so the
    caller writes index rows only for what a commit reported: anything else is an orphan that gc removes.
    Use it as a context manager: leaving the block without committing aborts what was put.
    """

    def put(
        self,
        name: str,
        chunks: Iterable[bytes],
        metadata: Mapping[str, str],
        *,
        replace: ReplaceJudge | None = None,
    ) -> None:
        """Take a blob's bytes (all of them: a checking iterator may raise, and then nothing of this blob
        is kept and the batch goes on). A name put twice in one batch keeps the first. ``replace``: as for
        :meth:`BlobStore.put` (a replaced blob is reported as created)."""
        ...

    def commit(self) -> dict[str, bool]:
        """Make every blob put so far durable and visible, create-only as :meth:`BlobStore.put`: name ->
        True if created, False if it was already stored. Then the batch is empty again."""
        ...

    def abort(self) -> None:
        """Forget what was put and not committed; nothing of it stays."""
        ...

    def __enter__(self) -> BlobBatch: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class PutsInBatches(Protocol):
    """A store with a batch of its own, cheaper per blob than one :meth:`BlobStore.put` each."""

    def batch(self) -> BlobBatch:
        """A new, empty batch."""
        ...


@runtime_checkable
class ReadsWhole(Protocol):
    """A store that reads a small blob whole in fewer round trips than :meth:`BlobStore.open` and a read.

    What :func:`open_many` reads ahead with, where the caller checks the bytes itself (the service verifies
    every member's SHA-256 against the index while it streams).
    """

    def read_whole(self, name: str, limit: int) -> BlobReader | None:
        """The blob as a reader: its bytes held in memory if it has at most ``limit`` bytes, else streamed as
        :meth:`BlobStore.open` would; ``None`` on a miss.

        The reader's ``info.size`` is exact; ``info.created`` and ``info.metadata`` are what the read itself
        told, which may be less exact than :meth:`BlobStore.stat` (on GCS: Last-Modified, to the second, and
        the metadata as response headers carry it).
        """
        ...


@runtime_checkable
class ReadsAhead(Protocol):
    """A store whose reads are round trips worth overlapping (a remote one): :func:`open_many` reads up to
    ``read_ahead`` of the small blobs that follow on threads meanwhile, holding at most ``read_ahead_bytes``
    of them in memory together. A store without it is read one blob at a time (a local read costs no
    round trip)."""

    read_ahead: int
    """How many small blobs a bundle or a packing run reads at once (> 0)."""
    read_ahead_bytes: int
    """How many bytes the blobs read ahead may hold together."""


@runtime_checkable
class StoresPacks(Protocol):
    """A store that also keeps packs: one object holding copies of many small blobs one after another, so
    that a bundle reads them with a few ranged requests instead of one request each (see
    :mod:`cache_server.packs`).

    A pack is extra: every blob in it is also stored on its own, the index says where in which pack its copy
    lies, and a reader checks each copy against the blob's SHA-256 before using it. Packs are written
    whole, once, under a new random id (:func:`check_pack_id`), kept apart from the blobs (:data:`PACK_DIR`;
    :meth:`BlobStore.list` never shows them) and deleted by gc once no index row points into them.
    ``packs_by_default``: whether packing pays on this store (a remote one, where each request costs a round
    trip), so the server packs unless ``XLA_CACHE_PACKS`` says otherwise.
    """

    packs_by_default: bool

    def put_pack(self, pack_id: str, pieces: Sequence[bytes]) -> None:
        """Store the pack made of ``pieces`` (held in memory by the caller), durably, before returning."""
        ...

    def read_pack(self, pack_id: str, start: int, length: int) -> bytes | None:
        """The ``length`` bytes from ``start`` (fewer if the pack is shorter); None if the pack is gone."""
        ...

    def delete_pack(self, pack_id: str) -> bool:
        """Remove a pack. True if it was there."""
        ...

    def list_packs(self) -> Iterator[BlobInfo]:
        """Every pack (``name`` is its id), in no particular order."""
        ...


ABILITIES: tuple[type, ...] = (SignsUrls, SweepsTempFiles, PutsInBatches, ReadsWhole, ReadsAhead, StoresPacks)
"""Every optional ability a backend may have; ``tests/storage/test_contract.py`` checks each one a backend
has (and fails for an ability it has no check for)."""


class SequentialBatch:
    """The batch of a store that has none of its own: each put is a :meth:`BlobStore.put` at once, so blobs
    are visible before :meth:`commit` (which only reports them); abort cannot take them back."""

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self._done: dict[str, bool] = {}

    def put(
        self,
        name: str,
        chunks: Iterable[bytes],
        metadata: Mapping[str, str],
        *,
        replace: ReplaceJudge | None = None,
    ) -> None:
        created = self._store.put(name, chunks, metadata, replace=replace)
        self._done.setdefault(name, created)

    def commit(self) -> dict[str, bool]:
        done, self._done = self._done, {}
        return done

    def abort(self) -> None:
        self._done = {}

    def __enter__(self) -> SequentialBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()


class ConcurrentBatch:
    """Puts of small blobs run on a few threads at once (a remote store's round trips overlap); a blob
    over ``buffer_limit`` bytes is put at once, streamed. A small blob is held in memory until its put
    ends, at most ``workers`` times ``buffer_limit`` bytes in all."""

    def __init__(self, store: BlobStore, *, workers: int = 16, buffer_limit: int = 8 * MIB) -> None:
        self._store = store
        self._workers = workers
        self._buffer_limit = buffer_limit
        self._pool: ThreadPoolExecutor | None = None
        self._slots = threading.BoundedSemaphore(workers)
        self._pending: dict[str, Future[bool]] = {}
        self._done: dict[str, bool] = {}

    def put(
        self,
        name: str,
        chunks: Iterable[bytes],
        metadata: Mapping[str, str],
        *,
        replace: ReplaceJudge | None = None,
    ) -> None:
        held: list[bytes] = []
        size = 0
        iterator = iter(chunks)
        for chunk in iterator:
            held.append(chunk)
            size += len(chunk)
            if size > self._buffer_limit:  # large: stream it now, in this thread
                created = self._store.put(name, itertools.chain(held, iterator), metadata, replace=replace)
                self._done.setdefault(name, created)
                return
        if name in self._pending or name in self._done:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="xla-cache-batch")
        self._slots.acquire()
        future = self._pool.submit(self._put, name, held, dict(metadata), replace)
        future.add_done_callback(lambda _: self._slots.release())
        self._pending[name] = future

    def _put(
        self, name: str, held: list[bytes], metadata: dict[str, str], replace: ReplaceJudge | None
    ) -> bool:
        return self._store.put(name, held, metadata, replace=replace)

    def commit(self) -> dict[str, bool]:
        pending, done = self._pending, self._done
        self._pending, self._done = {}, {}
        failure: BaseException | None = None
        for name, future in pending.items():
            try:
                done[name] = future.result()
            except BaseException as exc:  # wait for every put; report the first failure
                failure = failure or exc
        if failure is not None:
            raise failure
        return done

    def abort(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending, self._done = {}, {}

    def __enter__(self) -> ConcurrentBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()
        if self._pool is not None:
            self._pool.shutdown(wait=True)


class HeldReader:
    """A blob read whole into memory (ahead of its turn); ``identity`` as the reader it was read from told."""

    def __init__(self, info: BlobInfo, chunks: list[bytes], identity: Hashable | None = None) -> None:
        self.info = info
        self.identity = identity
        self._chunks = chunks

    def chunks(self) -> Iterator[bytes]:
        yield from self._chunks

    def close(self) -> None:
        self._chunks = []

    def __enter__(self) -> HeldReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_whole(store: BlobStore, name: str, limit: int) -> BlobReader | None:
    if isinstance(store, ReadsWhole):
        return store.read_whole(name, limit)
    reader = store.open(name)
    if reader is None:
        return None
    with reader:
        return HeldReader(reader.info, list(reader.chunks()), reader.identity)


def open_sized(
    store: BlobStore, name: str, size: int, small: int, *, whole: ReadsWhole | None = None
) -> BlobReader | None:
    """Open one blob expected to have ``size`` bytes: read whole at once where the store :class:`ReadsWhole`
    and ``size`` is at most ``small`` (one read; on GCS one request instead of two), else opened to be
    streamed. ``whole``: the store, already known to read whole (saves the protocol check per blob)."""
    if whole is None and isinstance(store, ReadsWhole):
        whole = store
    return whole.read_whole(name, small) if whole is not None and size <= small else store.open(name)


def open_many(
    store: BlobStore,
    blobs: Sequence[tuple[str, int]],
    *,
    read_ahead: int | None = None,
    small: int = 8 * MIB,
    budget: int | None = None,
) -> Iterator[BlobReader | None]:
    """Open each of ``blobs`` (name, expected size) in order: a reader, or None on a miss.

    ``read_ahead``: by default the store's own (:class:`ReadsAhead`), else 0. With 0 they are read one at a
    time, those expected to have at most ``small`` bytes in one read where the store :class:`ReadsWhole`.
    With ``read_ahead`` > 0, up to that many of the blobs that follow, each expected to have at most
    ``small`` bytes, are read on threads meanwhile (a remote store's round trips overlap), in one round trip
    each where the store :class:`ReadsWhole`; larger ones are opened when their turn comes and streamed. The
    blobs read ahead are expected to hold at most ``budget`` bytes together (by default the store's
    ``read_ahead_bytes`` where it :class:`ReadsAhead`, else ``read_ahead`` times ``small``; a blob larger
    than the budget alone is still read, alone). The caller closes each reader.
    """
    tuned = store if isinstance(store, ReadsAhead) else None
    if read_ahead is None:
        read_ahead = tuned.read_ahead if tuned is not None else 0
    if read_ahead <= 0:
        whole = store if isinstance(store, ReadsWhole) else None
        for name, size in blobs:
            yield open_sized(store, name, size, small, whole=whole)
        return
    if budget is None:
        budget = tuned.read_ahead_bytes if tuned is not None else read_ahead * small
    with ThreadPoolExecutor(read_ahead, thread_name_prefix="xla-cache-read-ahead") as pool:
        window: deque[tuple[str, int, Future[BlobReader | None] | None]] = deque()
        upcoming = iter(blobs)
        following: tuple[str, int] | None = next(upcoming, None)
        held = 0  # expected bytes of the blobs in the window
        try:
            for _ in blobs:
                while following is not None and len(window) < read_ahead:
                    name, size = following
                    ahead = size <= small
                    if ahead and window and held + size > budget:
                        break
                    future = pool.submit(_read_whole, store, name, small) if ahead else None
                    cost = size if ahead else 0
                    window.append((name, cost, future))
                    held += cost
                    following = next(upcoming, None)
                name, cost, future = window.popleft()
                held -= cost
                yield future.result() if future is not None else store.open(name)
        finally:
            for _, _, future in window:
                if future is None or future.cancel():
                    continue
                try:  # wait for a read already running, so no thread outlives the pool
                    reader = future.result()
                except Exception:  # the caller stopped early; this read's failure is nobody's concern
                    continue
                if reader is not None:
                    reader.close()


def open_batch(store: BlobStore) -> BlobBatch:
    """The store's own batch, or one put at a time."""
    return store.batch() if isinstance(store, PutsInBatches) else SequentialBatch(store)
