"""Blobs already stored: which ones cannot be read, and what an upload does with one found under its name.

The one set of rules both uploads follow, through the one entry writer (:mod:`cache_server.service.writer`:
a single ``PUT`` and each member of a bulk upload). The index is the judge: a ``409`` means the
key is stored *in the index* with another digest. A blob without an index row (an orphan: its upload died
between the blob and the row, as a bulk upload during a database outage does) never blocks an upload:

* a sound orphan with the upload's digest, whose bytes hash to it, is adopted (``200``);
* an unreadable blob (:func:`unreadable`), and an orphan with other bytes created before this upload began
  and more than ``XLA_CACHE_ORPHAN_GRACE_SECONDS`` ago, is replaced by the upload (``201``), by the store's
  compare-and-swap (``put(..., replace=...)``), so of two hosts replacing one orphan one wins and the other
  finds the winner's blob;
* a row-less blob younger than that may belong to an upload still in flight (its row not written yet):
  ``503`` with Retry-After (:class:`~cache_server.errors.EntryInFlight`), never ``409``.

A blob whose row has the upload's digest but which cannot be read (or holds other bytes) is replaced too:
the upload restores the entry.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

from cache_protocol import SHA256_PATTERN
from cache_server.domain import Clock, EntryInfo
from cache_server.errors import DigestConflict, EntryInFlight
from cache_server.index.entries import EntryRepository
from cache_server.storage.base import BlobInfo, BlobStore, blob_name

__all__ = ["Adopt", "TakenName", "unreadable"]


def unreadable(info: BlobInfo) -> str | None:
    """Why a stored blob cannot stand for an entry (its store cannot read its record, or its metadata lacks
    a valid ``sha256``: on GCS the analogue of a damaged header), or None if it can."""
    if info.damaged is not None:
        return info.damaged
    if not SHA256_PATTERN.fullmatch(info.metadata.get("sha256", "")):
        return "its metadata has no valid sha256"
    return None


@dataclass(frozen=True)
class Adopt:
    """The blob already stored holds the upload's bytes: its row is written if missing (``200``)."""

    info: BlobInfo


class TakenName:
    """One upload's rules for a blob already stored under its key; see the module docstring.

    ``row``: the index row the caller already looked up, if it did (a PUT does; a bulk member asks only when
    its name turns out to be taken). ``began``: when this upload began, and ``clock`` the time now, both as
    the store tells a blob's creation time (real UTC).
    """

    def __init__(
        self,
        entries: EntryRepository,
        store: BlobStore,
        namespace: str,
        key: str,
        sha256: str,
        *,
        began: dt.datetime,
        grace_seconds: float,
        clock: Clock,
        row: EntryInfo | None = None,
        row_known: bool = False,
    ) -> None:
        self._entries = entries
        self._store = store
        self._namespace = namespace
        self._key = key
        self._sha256 = sha256
        self._began = began
        self._grace = dt.timedelta(seconds=grace_seconds)
        self._clock = clock
        self._row = row
        self._row_known = row_known

    def _index_row(self) -> EntryInfo | None:
        """The key's row, looked up once (the judge and the outcome of one upload come moments apart)."""
        if not self._row_known:
            self._row = self._entries.get_entry(self._namespace, self._key)
            self._row_known = True
        return self._row

    def _fresh_row(self) -> EntryInfo | None:
        """The key's row as the index holds it now: before a blob is replaced, a row written since this
        upload began (another upload of the key finishing meanwhile) must be seen, or the replace would
        overwrite an entry the index already holds with another digest."""
        self._row = self._entries.get_entry(self._namespace, self._key)
        self._row_known = True
        return self._row

    def judge(self, info: BlobInfo) -> bool:
        """Whether the upload replaces ``info``, the blob stored under its name (a
        :data:`~cache_server.storage.base.ReplaceJudge`)."""
        sound = unreadable(info) is None
        if sound and info.metadata["sha256"] == self._sha256:
            if self._index_row() is not None:
                return False  # already stored: the common case of two hosts uploading one entry
            return not self._holds_upload(info)  # an orphan: adopted only if its bytes are right
        row = self._fresh_row()
        if row is not None:
            return row.sha256 == self._sha256  # the row is ours and its blob is wrong: restore it
        if not sound:
            return True  # no upload of this server leaves such a blob
        return self._stale(info)

    def _stale(self, info: BlobInfo) -> bool:
        """Created before this upload began and longer ago than any gap between a blob and its row."""
        return info.created < self._began and info.created < self._clock() - self._grace

    def _holds_upload(self, info: BlobInfo) -> bool:
        reader = self._store.open(info.name)
        if reader is None:
            return False
        digest = hashlib.sha256()
        with reader:
            for chunk in reader.chunks():
                digest.update(chunk)
        return digest.hexdigest() == self._sha256

    def outcome(self) -> Adopt:
        """After a put that neither created nor replaced the blob: :class:`Adopt` if it holds the upload's
        bytes; else raises :class:`DigestConflict` (the index holds another digest) or
        :class:`EntryInFlight` (no row says so: an upload in flight, or an orphan too young to replace)."""
        name = blob_name(self._namespace, self._key)
        info = self._store.stat(name)
        row = self._index_row()
        ours = info is not None and unreadable(info) is None and info.metadata["sha256"] == self._sha256
        if info is not None and ours and (row is None or row.sha256 == self._sha256):
            return Adopt(info)
        row = self._entries.get_entry(self._namespace, self._key)  # asked afresh: it may be new
        if row is not None and row.sha256 != self._sha256:
            raise conflict(self._namespace, self._key, row.sha256)
        grace = f"{self._grace.total_seconds():g}"
        raise EntryInFlight(
            f"The key {self._key!r} in namespace {self._namespace!r} holds a blob with no index row yet "
            f"(an upload in flight, or one that died less than {grace} s ago); retry later."
        )


def conflict(namespace: str, key: str, stored: str) -> DigestConflict:
    """The key is stored in the index with another digest: the first upload stays."""
    return DigestConflict(
        f"The key {key!r} in namespace {namespace!r} is already stored with SHA-256 {stored}; "
        "entries are immutable and the first upload stays."
    )
