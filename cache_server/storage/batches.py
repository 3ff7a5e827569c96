"""Batches for any store: :func:`open_batch` gives the store's own (:class:`PutsInBatches`) or a
:class:`SequentialBatch` (one put at a time); :class:`ConcurrentBatch` overlaps the puts of small blobs, for
a remote store's own batch."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from cache_server.storage.abilities import BlobBatch, PutsInBatches
from cache_server.storage.base import MIB, BlobStore, ReplaceJudge

__all__ = ["ConcurrentBatch", "SequentialBatch", "open_batch"]


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


def open_batch(store: BlobStore) -> BlobBatch:
    """The store's own batch, or one put at a time."""
    return store.batch() if isinstance(store, PutsInBatches) else SequentialBatch(store)
