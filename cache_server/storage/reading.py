"""Reading many blobs: :func:`open_many` reads them in order, the next small ones meanwhile where the store
:class:`ReadsAhead`; :func:`open_sized` opens one, read whole where it is small and the store
:class:`ReadsWhole`; :class:`HeldReader` is a blob read whole into memory."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from cache_server.storage.abilities import ReadsAhead, ReadsWhole
from cache_server.storage.base import MIB, BlobInfo, BlobReader, BlobStore

__all__ = ["HeldReader", "open_many", "open_sized"]


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
