"""The optional abilities of a blob store: each a protocol of its own, methods and attributes typed, so
callers ask ``isinstance(store, SignsUrls)`` rather than probing for attributes. A backend implements those
it has; :data:`ABILITIES` lists them all, and ``tests/storage/test_contract.py`` checks each one a backend
has. The required protocol and its contract (``BlobStore``, ``check_pack_id``, ``PACK_DIR``):
:mod:`cache_server.storage.base`; ``open_many``: :mod:`cache_server.storage.reading`.

:class:`SignsUrls` (direct downloads that bypass the server), :class:`SweepsTempFiles` (cleaning up after
uploads that died), :class:`PutsInBatches` (many blobs made durable together, in a :class:`BlobBatch`: one
sync for a batch instead of one per blob), :class:`ReadsWhole` (a small blob read in one round trip, not an
open and a read), :class:`ReadsAhead` (how many reads of small blobs overlap) and :class:`StoresPacks`
(packs: copies of many small blobs in one object, read by byte range).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from cache_server.storage.base import BlobInfo, BlobReader, ReplaceJudge

__all__ = [
    "ABILITIES",
    "BlobBatch",
    "PutsInBatches",
    "ReadsAhead",
    "ReadsWhole",
    "SignsUrls",
    "StoresPacks",
    "SweepsTempFiles",
]


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
    :mod:`cache_server.service.packs`).

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
