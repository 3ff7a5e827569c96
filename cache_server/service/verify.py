"""Verification of stored bytes as they are read, and the removal of an entry found corrupt.

A reader never gets complete bytes whose SHA-256 does not match the index: small entries are checked
before their first byte (:mod:`cache_server.service.reads`), large ones while they stream (a mismatch breaks
the stream). One exception, for speed: a blob whose unchanged file this process has already hashed is
streamed unhashed for a while (:class:`VerifiedFiles`): damage the file system does not notice (bit rot) then
reaches the client whole, and the client's own SHA-256 check (every client here makes it) is what refuses it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterator

from cache_server.domain import EntryInfo, EntryRef, utcnow
from cache_server.errors import ResponseBrokenOff
from cache_server.index.entries import EntryRepository
from cache_server.service.hot import HotEntries
from cache_server.storage.base import BlobReader, BlobStore, blob_name

__all__ = ["REVERIFY_SECONDS", "CorruptBlob", "ReadChecker", "VerifiedFiles"]

log = logging.getLogger(__name__)

REVERIFY_SECONDS = 600.0
"""How long a blob's file, once hashed whole and found right, is trusted without hashing again."""


class CorruptBlob(ResponseBrokenOff):
    """A stored blob's bytes do not match the index; raised mid-stream so the response breaks (logged once,
    where it is found: :meth:`ReadChecker._corrupt`)."""


class VerifiedFiles:
    """The blob files this process has read whole and found to match their digest, for a while.

    Hashing every byte of every read caps a large download near the speed of SHA-256 on one core (a fifth
    of what the disk and the socket could do), and was a sixth of the server's CPU in a bundle of 2,000
    small entries. So a blob is hashed the first time this process serves it; later reads of the *same
    unchanged file* (its store's identity: device, inode, size and change times for a local file) within
    ``ttl`` seconds go unhashed, still checked for length. A file that changes in any way is hashed again,
    and every client checks each entry's SHA-256 itself. Identities are kept as a 16-byte digest: ``capacity``
    of them take a few MB.
    """

    def __init__(self, ttl: float = REVERIFY_SECONDS, capacity: int = 65_536) -> None:
        self._ttl = ttl
        self._capacity = capacity
        self._lock = threading.Lock()
        self._until: OrderedDict[Hashable, float] = OrderedDict()

    def trusted(self, identity: Hashable) -> bool:
        with self._lock:
            until = self._until.get(identity)
            if until is None:
                return False
            if until < time.monotonic():
                del self._until[identity]
                return False
            return True

    def add(self, identity: Hashable) -> None:
        with self._lock:
            self._until[identity] = time.monotonic() + self._ttl
            self._until.move_to_end(identity)
            while len(self._until) > self._capacity:
                self._until.popitem(last=False)


class ReadChecker:
    """Checks the bytes of entries as they are read from the store, and drops an entry found corrupt (its
    row from the index, its memory copy from ``hot``, then its blob) so that its next upload stores it
    afresh instead of finding the bad blob "already stored"."""

    def __init__(self, entries: EntryRepository, store: BlobStore, hot: HotEntries) -> None:
        self._entries = entries
        self._store = store
        self._hot = hot
        self._files = VerifiedFiles()

    def drop_corrupt(self, entry: EntryInfo | EntryRef) -> bool:
        """Remove an entry whose stored bytes no longer match its digest (row first, then blob); whether it
        was removed here.

        Only the entry that was read: a key evicted and stored again with other bytes since the read (its
        row and blob carry the new digest) is left alone.
        """
        name = blob_name(entry.namespace, entry.key)
        try:
            removed = self._entries.delete_entry(
                entry.namespace, entry.key, policy="damaged", when=utcnow(), sha256=entry.sha256
            )
            if removed is None:
                return False
            self._hot.forget([(entry.namespace, entry.key)])
            info = self._store.stat(name)
            if info is not None and info.metadata.get("sha256") == entry.sha256:
                self._store.delete(name)
            return True
        except Exception:  # the read already failed; a failed clean-up must not hide that
            log.exception("could not drop corrupt entry %s/%s", entry.namespace, entry.key)
            return False

    def verified(self, entry: EntryInfo | EntryRef, reader: BlobReader) -> Iterator[bytes]:
        """Stream the blob, holding back its last chunk until the whole digest has been checked.

        A blob whose bytes no longer match the index therefore never reaches a reader complete: the
        stream stops short of its Content-Length and the client sees a broken transfer; the entry is dropped.
        A blob whose unchanged file this process already hashed is streamed unhashed
        (:class:`VerifiedFiles`), its length still checked.
        """
        identity = reader.identity
        if identity is not None:
            identity = hashlib.blake2b(
                repr((entry.namespace, entry.key, entry.sha256, identity)).encode(), digest_size=16
            ).digest()
            if self._files.trusted(identity):
                yield from self._length_checked(entry, reader)
                return
        digest = hashlib.sha256()
        size = 0
        held: bytes | None = None
        try:
            for chunk in reader.chunks():
                size += len(chunk)
                if size > entry.size:
                    break
                digest.update(chunk)
                if held is not None:
                    yield held
                held = chunk
        finally:
            reader.close()
        if size != entry.size or digest.hexdigest() != entry.sha256:
            self._corrupt(entry)
        if identity is not None:
            self._files.add(identity)
        if held is not None:
            yield held

    def _length_checked(self, entry: EntryInfo | EntryRef, reader: BlobReader) -> Iterator[bytes]:
        size = 0
        try:
            for chunk in reader.chunks():
                size += len(chunk)
                if size > entry.size:
                    break
                yield chunk
        finally:
            reader.close()
        if size != entry.size:
            self._corrupt(entry)

    def _corrupt(self, entry: EntryInfo | EntryRef) -> None:
        """Drop the entry and break the read off, with the one line that says so."""
        dropped = self.drop_corrupt(entry)
        log.error(
            "corrupt blob %s/%s: stored bytes do not match the index; %s",
            entry.namespace,
            entry.key,
            "the entry is dropped, its next upload stores it again"
            if dropped
            else "the entry was left as it is",
        )
        raise CorruptBlob(f"stored bytes of {entry.namespace}/{entry.key} do not match the index")
