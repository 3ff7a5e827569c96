"""Single entries by their key: what the index knows of one (``HEAD``), its bytes (``GET``), its removal.

An entry read a moment ago is answered from memory (:mod:`cache_server.service.hot`) without waiting on the
index or the store; otherwise its row is looked up once, and an entry of at most :data:`WHOLE_READ_BYTES` is
read whole and checked before its first byte is sent (:mod:`cache_server.service.verify`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from cache_server import metrics
from cache_server.background.access import AccessRecorder
from cache_server.domain import EntryInfo, utcnow
from cache_server.errors import EntryNotFound
from cache_server.index.entries import EntryRepository
from cache_server.names import check_key, check_namespace
from cache_server.service.hot import HotEntries
from cache_server.service.signed_urls import SignedEntry, Signing
from cache_server.service.verify import CorruptBlob, ReadChecker
from cache_server.storage.abilities import ReadsWhole
from cache_server.storage.base import BlobStore, blob_name
from cache_server.storage.reading import open_sized

__all__ = ["PLAIN", "WHOLE_READ_BYTES", "EntryRead", "NotModified", "OpenedEntry", "ReadWish", "Reads"]

log = logging.getLogger(__name__)
# the children of the memory-answer counter, looked up once (answering from memory is the fastest path)
_MEMORY_GET = metrics.MEMORY_ANSWERS.labels("get")
_MEMORY_HEAD = metrics.MEMORY_ANSWERS.labels("head")
_MEMORY_NOT_MODIFIED = metrics.MEMORY_ANSWERS.labels("not_modified")
WHOLE_READ_BYTES = 1024 * 1024
"""Entries up to this size are read whole and checked before the first byte is sent (one piece, no
stream): a blob found corrupt then costs its reader a miss, not a broken transfer. Checked: hashed, or only
measured where this process hashed the same unchanged file before
(:class:`~cache_server.service.verify.VerifiedFiles`)."""


@dataclass(frozen=True)
class OpenedEntry:
    """An entry ready to send: what the index knows of it and a checking byte iterator; for an entry of at
    most :data:`WHOLE_READ_BYTES`, also its bytes, read whole and already checked (``content``)."""

    entry: EntryInfo
    body: Iterator[bytes]
    content: bytes | None = None


@dataclass(frozen=True)
class NotModified:
    """The reader already has the entry (its ``If-None-Match`` names the entry's digest)."""

    entry: EntryInfo


EntryRead = OpenedEntry | NotModified | SignedEntry
"""What a read of one entry gives: its bytes, "you have it", or a signed URL to fetch it from."""


@dataclass(frozen=True)
class ReadWish:
    """How a reader asks for an entry: ``if_none_match`` as its header says (``"<digest>"`` or ``*``: it
    has the entry), ``redirect`` to a signed URL where the server hands them out, ``live``: it is a job
    following the namespace (counted as a live delivery too)."""

    if_none_match: str | None = None
    redirect: bool = False
    live: bool = False

    def has(self, entry: EntryInfo) -> bool:
        """Whether the reader has the entry already (304)."""
        return self.if_none_match is not None and self.if_none_match.strip() in (f'"{entry.sha256}"', "*")


PLAIN = ReadWish()
"""A plain read: the entry's bytes (no ``If-None-Match``, no redirect, not a follower)."""


def _not_found(namespace: str, key: str) -> EntryNotFound:
    return EntryNotFound(f"No entry {key!r} in namespace {namespace!r}.")


class Reads:
    """Reads of single entries over the index's :class:`EntryRepository` and one store; ``access`` counts
    hits and misses, ``hot`` keeps what reads found for the next ones."""

    def __init__(
        self,
        entries: EntryRepository,
        store: BlobStore,
        *,
        access: AccessRecorder,
        hot: HotEntries,
        verifier: ReadChecker,
        signing: Signing,
    ) -> None:
        self._entries = entries
        self._store = store
        self._whole = store if isinstance(store, ReadsWhole) else None  # a single GET reads small blobs whole
        self._access = access
        self._hot = hot
        self._verifier = verifier
        self._signing = signing

    def head_entry(self, namespace: str, key: str) -> EntryInfo:
        """What the index knows of an entry, without counting a hit."""
        stamp = self._hot.stamp()
        entry = self._entries.get_entry(check_namespace(namespace), check_key(key))
        if entry is None:
            raise _not_found(namespace, key)
        self._hot.put(entry, None, stamp)
        return entry

    def head_hot(self, namespace: str, key: str) -> EntryInfo | None:
        """:meth:`head_entry` from memory (:mod:`cache_server.service.hot`), or ``None`` when only it can
        tell.

        Never waits on the index or the store: safe to call on the event loop.
        """
        item = self._hot.get(namespace, key)
        if item is None:
            return None
        _MEMORY_HEAD.inc()
        return item.entry

    def read_hot(self, namespace: str, key: str, wish: ReadWish = PLAIN) -> EntryRead | None:
        """:meth:`read_entry` from memory, or ``None`` when only it can answer (an entry not read a moment
        ago, one too large to keep, a wish for a signed URL on a server that hands them out).

        Never waits on the index or the store: safe to call on the event loop. Counted as read_entry counts.
        """
        if wish.redirect and self._signing.on:
            return None
        item = self._hot.get(namespace, key)
        if item is None:
            return None
        entry = item.entry
        if wish.has(entry):
            _MEMORY_NOT_MODIFIED.inc()
            return NotModified(entry)
        if item.content is None:
            return None
        self._access.hit(namespace, key, entry.size, live=wish.live)
        _MEMORY_GET.inc()
        return OpenedEntry(entry=entry, body=iter((item.content,)), content=item.content)

    def read_entry(self, namespace: str, key: str, wish: ReadWish = PLAIN) -> EntryRead:
        """Read an entry, looking its row up once.

        :class:`NotModified` when the reader has it (not counted); for a ``redirect`` on a server that
        signs URLs, a :class:`SignedEntry` (a hit); otherwise the :class:`OpenedEntry` to stream (a hit).
        :class:`EntryNotFound` on a miss (counted).
        """
        check_namespace(namespace)
        check_key(key)
        stamp = self._hot.stamp()
        entry = self._entries.get_entry(namespace, key)
        if entry is None:
            if wish.if_none_match is None:  # a revalidation is not a lookup: not counted, as before
                self._access.miss(namespace)
            raise _not_found(namespace, key)
        if wish.has(entry):
            self._hot.put(entry, None, stamp)
            return NotModified(entry)
        if wish.redirect and (signed := self._signing.sign(entry)) is not None:
            self._access.hit(namespace, key, entry.size, live=wish.live)
            return signed
        reader = open_sized(
            self._store, blob_name(namespace, key), entry.size, WHOLE_READ_BYTES, whole=self._whole
        )
        if reader is None:
            self._access.miss(namespace)
            log.warning("index row without blob: %s/%s (gc will drop it)", namespace, key)
            raise _not_found(namespace, key)
        if entry.size > WHOLE_READ_BYTES:
            self._access.hit(namespace, key, entry.size, live=wish.live)
            self._hot.put(entry, None, stamp)
            return OpenedEntry(entry=entry, body=self._verifier.verified(entry, reader))
        try:
            content = b"".join(self._verifier.verified(entry, reader))
        except CorruptBlob:
            self._access.miss(namespace)
            raise _not_found(namespace, key) from None
        self._access.hit(namespace, key, entry.size, live=wish.live)
        self._hot.put(entry, content, stamp)
        return OpenedEntry(entry=entry, body=iter((content,)), content=content)

    def delete_entry(self, namespace: str, key: str) -> None:
        """Remove an entry: index row first, then the blob."""
        check_namespace(namespace)
        check_key(key)
        if self._entries.delete_entry(namespace, key, policy="admin", when=utcnow()) is None:
            raise _not_found(namespace, key)
        self._hot.forget([(namespace, key)])
        self._store.delete(blob_name(namespace, key))
