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

Some abilities only some backends have; each is a protocol of its own in
:mod:`cache_server.storage.abilities` (its ``ABILITIES``), so callers ask ``isinstance(store, SignsUrls)``
rather than probing for attributes. A reader's :attr:`BlobReader.identity` is required but may be ``None``.
:func:`~cache_server.storage.batches.open_batch` gives a batch for any store;
:func:`~cache_server.storage.reading.open_many` reads many blobs in order, the next small ones meanwhile.
How to add a backend: :mod:`cache_server.storage`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cache_server.errors import InvalidName
from cache_server.names import check_key, check_namespace

__all__ = [
    "DAMAGED_DIR",
    "MIB",
    "PACK_DIR",
    "READ_CHUNK",
    "BlobInfo",
    "BlobReader",
    "BlobStore",
    "ReplaceJudge",
    "blob_name",
    "check_pack_id",
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
