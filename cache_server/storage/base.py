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
* **Plain errors.** Vendor errors are translated at the backend's edge: a backend that cannot reach its
  service (after retrying what is worth retrying) raises :class:`~cache_server.errors.StorageUnavailable`.

Some abilities only some backends have; each is a protocol of its own, so callers ask
``isinstance(store, SignsUrls)`` rather than probing for methods: :class:`SignsUrls` (direct downloads that
bypass the server) and :class:`SweepsTempFiles` (cleaning up after uploads that died).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cache_server.names import check_key, check_namespace

__all__ = [
    "MIB",
    "READ_CHUNK",
    "BlobInfo",
    "BlobReader",
    "BlobStore",
    "SignsUrls",
    "SweepsTempFiles",
    "blob_name",
    "parse_blob_name",
    "split_blob_name",
]

MIB = 1024 * 1024
READ_CHUNK = MIB
"""The most bytes one piece yielded by :meth:`BlobReader.chunks` holds, in every backend here."""


@dataclass(frozen=True)
class BlobInfo:
    """What a store knows about one stored blob."""

    name: str
    size: int
    created: dt.datetime
    metadata: Mapping[str, str] = field(default_factory=dict)


class BlobReader(AbstractContextManager["BlobReader"], Protocol):
    """An open blob: its info and an iterator over its bytes. Close it (or use ``with``) when done."""

    info: BlobInfo

    def chunks(self) -> Iterator[bytes]:
        """Yield the blob's bytes in order, in chunks of a bounded size."""
        ...

    def close(self) -> None:
        """Release the underlying file or connection."""
        ...


@runtime_checkable
class BlobStore(Protocol):
    """A place to keep immutable blobs. See the module docstring for the contract."""

    def put(self, name: str, chunks: Iterable[bytes], metadata: Mapping[str, str]) -> bool:
        """Store ``chunks`` under ``name`` unless it exists. True: created; False: it was already there.

        When the name already exists the chunks are still consumed (so a checking iterator can raise),
        but nothing is written.
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

    def list(self, prefix: str = "") -> Iterator[BlobInfo]:
        """Every stored blob whose name starts with ``prefix``, in no particular order."""
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
