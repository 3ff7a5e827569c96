"""The cache service: namespaces and entries (put, read, manifest, bundle, signed URLs). No HTTP here.

Consistency rules (DESIGN.md): the blob is written before its index row, and removed after it; a reader
never gets complete bytes whose SHA-256 does not match the index: small entries are checked before their
first byte, large ones while they stream (a mismatch breaks the stream). One exception, for speed: a large
blob whose unchanged file this process has already hashed is streamed unhashed for a while
(:class:`VerifiedFiles`): damage the file system does not notice (bit rot) then reaches the client whole,
and the client's own SHA-256 check (every client here makes it) is what refuses it.

The service owns what it is given: nothing else touches its repository or its store.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cache_protocol import (
    BUNDLE_SHA256_PAX,
)
from cache_protocol.tar import BLOCK, END, TarMember, member_header, padding
from cache_server import metrics
from cache_server.access import AccessRecorder
from cache_server.domain import Clock, EntryInfo, EntryRef, NamespaceInfo, utcnow
from cache_server.errors import (
    EntryNotFound,
    NamespaceNotFound,
    SignedUrlsUnavailable,
    TooManyKeys,
)
from cache_server.hot import HotEntries
from cache_server.index.entries import EntryRepository, FeedEntry
from cache_server.names import check_key, check_namespace
from cache_server.packs import packing_store, read_copies
from cache_server.quotas import Quotas
from cache_server.revocation import StillAllowed
from cache_server.service.bulk import BulkResult, put_members
from cache_server.service.writer import EntryWriter, StoredHook
from cache_server.settings import Settings
from cache_server.storage.base import (
    BlobReader,
    BlobStore,
    ReadsWhole,
    SignsUrls,
    blob_name,
    open_many,
    open_sized,
)
from cache_server.streams import coalesce

__all__ = [
    "CacheService",
    "CorruptBlob",
    "EntryRead",
    "NotModified",
    "OpenedEntry",
    "PutResult",
    "SignedEntry",
    "SignedUrls",
    "StoredHook",
]

log = logging.getLogger(__name__)
# the children of the memory-answer counter, looked up once (answering from memory is the fastest path)
_MEMORY_GET = metrics.MEMORY_ANSWERS.labels("get")
_MEMORY_HEAD = metrics.MEMORY_ANSWERS.labels("head")
_MEMORY_NOT_MODIFIED = metrics.MEMORY_ANSWERS.labels("not_modified")
WHOLE_READ_BYTES = 1024 * 1024
"""Entries up to this size are read whole and checked before the first byte is sent (one piece, no
stream): a blob found corrupt then costs its reader a miss, not a broken transfer. Checked: hashed, or only
measured where this process hashed the same unchanged file before (:class:`VerifiedFiles`)."""
REVERIFY_SECONDS = 600.0
"""How long a blob's file, once hashed whole and found right, is trusted without hashing again."""


class CorruptBlob(RuntimeError):
    """A stored blob's bytes do not match the index; raised mid-stream so the response breaks."""


@dataclass(frozen=True)
class PutResult:
    """Outcome of an upload: ``created`` is False when the same bytes were already stored."""

    created: bool
    namespace: str
    key: str
    size: int
    sha256: str


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


@dataclass(frozen=True)
class SignedEntry:
    """An entry, and a URL its bytes can be downloaded from until it expires."""

    key: str
    url: str
    size: int
    sha256: str


@dataclass(frozen=True)
class SignedUrls:
    """Signed URLs for the stored keys among those asked for, and the keys that are not stored."""

    expires_in: int
    entries: list[SignedEntry]
    missing: list[str]


EntryRead = OpenedEntry | NotModified | SignedEntry
"""What a read of one entry gives: its bytes, "you have it", or a signed URL to fetch it from."""


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


def _reader_has(entry: EntryInfo, if_none_match: str | None) -> bool:
    """Whether an ``If-None-Match`` names the entry's digest (or is ``*``): the reader has it (304)."""
    return if_none_match is not None and if_none_match.strip() in (f'"{entry.sha256}"', "*")


def _not_found(namespace: str, key: str) -> EntryNotFound:
    return EntryNotFound(f"No entry {key!r} in namespace {namespace!r}.")


class _Signer:
    """Short-lived signed URLs, so many hosts fetch bytes from the bucket and not through the server.

    The URL is made locally, without asking the store whether the blob is there: the consistency rules
    (blob before row, row removed before blob) make a row without a blob rare, and then the download itself
    answers 404.
    """

    def __init__(self, store: SignsUrls, seconds: int) -> None:
        self._store = store
        self.seconds = seconds

    def sign(self, entry: EntryInfo) -> SignedEntry | None:
        """A URL for the entry, or None when the store's credentials cannot sign."""
        url = self._store.signed_url(blob_name(entry.namespace, entry.key), self.seconds)
        if url is None:
            return None
        return SignedEntry(key=entry.key, url=url, size=entry.size, sha256=entry.sha256)

    def sign_all(self, entries: Sequence[EntryRef]) -> list[SignedEntry] | None:
        """URLs for all of ``entries`` (signed together), or None when the store's credentials cannot sign."""
        names = [blob_name(entry.namespace, entry.key) for entry in entries]
        urls = self._store.signed_urls(names, self.seconds) if names else {}
        if urls is None or any(name not in urls for name in names):
            return None
        return [
            SignedEntry(key=entry.key, url=urls[name], size=entry.size, sha256=entry.sha256)
            for entry, name in zip(entries, names, strict=True)
        ]


class CacheService:
    """Entries and namespaces over the index's :class:`EntryRepository` and one blob store.

    ``access`` counts hits and misses; ``on_stored`` hears of each new entry; ``clock`` gives the times
    written to the index; ``hot`` keeps what single reads found for the next ones (:mod:`cache_server.hot`;
    built from the settings when not given). Signed URLs are handed out when ``XLA_CACHE_SIGNED_URL_SECONDS``
    > 0 and the store can sign (:class:`~cache_server.storage.base.SignsUrls`).
    """

    def __init__(
        self,
        settings: Settings,
        entries: EntryRepository,
        store: BlobStore,
        access: AccessRecorder,
        *,
        on_stored: StoredHook | None = None,
        clock: Clock = utcnow,
        hot: HotEntries | None = None,
        quotas: Quotas | None = None,
    ) -> None:
        self._settings = settings
        self._quotas = quotas  # None: no quota is checked
        self._entries = entries
        self._store = store
        self._whole = store if isinstance(store, ReadsWhole) else None  # a single GET reads small blobs whole
        self._access = access
        self._on_stored = on_stored
        self._clock = clock
        self._verified_files = VerifiedFiles()
        if hot is None:
            hot = HotEntries(settings.hot_cache_bytes, settings.hot_cache_seconds)
        self.hot = hot
        self._packs = packing_store(store, settings.packs)
        self._writer = EntryWriter(
            settings, entries, store, on_stored=self._stored, clock=clock, quotas=quotas
        )
        seconds = settings.signed_url_seconds
        self._signer = _Signer(store, seconds) if seconds > 0 and isinstance(store, SignsUrls) else None

    # -- health -----------------------------------------------------------------------------------------
    def check_ready(self) -> None:
        """Raise IndexUnavailable or StorageUnavailable unless both are reachable."""
        self._entries.ping()
        self._store.check()

    # -- namespaces -------------------------------------------------------------------------------------
    def register_namespace(
        self,
        namespace: str,
        fingerprint: Mapping[str, Any],
        labels: Mapping[str, str],
        *,
        created_by: str | None = None,
    ) -> tuple[NamespaceInfo, bool]:
        """Create the namespace or replace its fingerprint and labels; returns it and whether it is new.

        Registering it again as it is writes nothing (a fleet of jobs starting at once registers one
        namespace many times over; its last use moves with its hits anyway). ``created_by``: the id of the
        token registering it, counted against ``XLA_CACHE_MAX_NAMESPACES_PER_TOKEN`` when it is new.
        """
        existing = self._entries.get_namespace(check_namespace(namespace))
        if (
            existing is not None
            and existing.fingerprint == dict(fingerprint)
            and existing.labels == dict(labels)
        ):
            return existing, False
        if existing is None and self._quotas is not None:
            self._quotas.check_new_namespace(namespace, created_by)
        return self._entries.upsert_namespace(
            namespace, fingerprint, labels, now=self._clock(), created_by=created_by
        )

    def get_namespace(self, namespace: str) -> NamespaceInfo:
        info = self._entries.get_namespace(check_namespace(namespace))
        if info is None:
            raise NamespaceNotFound(f"The namespace {namespace!r} has never been registered.")
        return info

    # -- upload -----------------------------------------------------------------------------------------
    def check_upload_size(self, declared: int | None) -> None:
        """Refuse at once an upload whose declared length is over the limit."""
        self._writer.check_size(declared)

    def put_entry(
        self,
        namespace: str,
        key: str,
        chunks: Iterable[bytes],
        *,
        sha256: str,
        declared_size: int | None = None,
        compile_time_ms: int | None = None,
        uploader: str | None = None,
        stored_by: str | None = None,
        still_allowed: StillAllowed | None = None,
    ) -> PutResult:
        """Store an entry: blob first (create-only), then its row (:mod:`cache_server.service.writer`).

        ``stored_by`` is the id of the token that sent it, kept with the entry (and in the blob's metadata,
        for reindex) so that everything one token stored can be found and removed. ``still_allowed``: whether
        that token is still active, asked once the row is written (:mod:`cache_server.revocation`).
        """
        check_namespace(namespace)
        check_key(key)
        self._writer.check_size(declared_size)
        existing = self._entries.get_entry(namespace, key)  # another digest: refused before the body
        upload = self._writer.begin(namespace, stored_by=stored_by, still_allowed=still_allowed)
        pending = self._writer.prepare(
            upload,
            key,
            sha256,
            size=declared_size,
            compile_time_ms=compile_time_ms,
            uploader=uploader,
            row=existing,
            row_known=True,
        )
        record, created = self._writer.put(upload, pending, chunks)
        return PutResult(
            created=created, namespace=namespace, key=key, size=record.size, sha256=record.sha256
        )

    def put_entries(
        self,
        namespace: str,
        members: Iterator[TarMember],
        *,
        stored_by: str | None = None,
        still_allowed: StillAllowed | None = None,
    ) -> BulkResult:
        """Store the members of one uploaded tar stream (see :mod:`cache_server.service.bulk`): each gets
        the outcome a ``PUT`` of it would have; a broken stream keeps what was committed before it. A
        revoked token (``still_allowed``) ends it as :mod:`cache_server.revocation` says.

        :class:`QuotaExceeded` at once when a quota of the namespace or the token is full; a member that
        would pass one is refused with it and nothing of it is stored."""
        upload = self._writer.begin(namespace, stored_by=stored_by, still_allowed=still_allowed)
        if upload.allowance is not None and (full := upload.allowance.full()) is not None:
            raise full
        return put_members(upload, members, self._writer, packs=self._packs)

    def _stored(self, namespace: str, key: str) -> None:
        """A new entry was stored: drop a memory copy of what the key held before (another process may have
        removed it meanwhile), then tell ``on_stored``."""
        self.hot.stored(namespace, key)
        if self._on_stored is not None:
            self._on_stored(namespace, key)

    # -- the change feed (see cache_server.feed) ---------------------------------------------------------
    def feed_head(self) -> int:
        """The feed's newest position: where a new follower starts."""
        return self._entries.feed_head()

    def feed_heads(self, after: int) -> dict[str, int]:
        """The namespaces whose feed grew after ``after``, with their newest position."""
        return self._entries.feed_heads(after)

    def feed(self, namespace: str, after: int, limit: int) -> list[FeedEntry]:
        """The namespace's entries stored after position ``after``, oldest first."""
        check_namespace(namespace)
        return self._entries.feed(namespace, after, limit)

    # -- reading one entry ------------------------------------------------------------------------------
    def head_entry(self, namespace: str, key: str) -> EntryInfo:
        """What the index knows of an entry, without counting a hit."""
        stamp = self.hot.stamp()
        entry = self._entries.get_entry(check_namespace(namespace), check_key(key))
        if entry is None:
            raise _not_found(namespace, key)
        self.hot.put(entry, None, stamp)
        return entry

    def head_hot(self, namespace: str, key: str) -> EntryInfo | None:
        """:meth:`head_entry` from memory (:mod:`cache_server.hot`), or ``None`` when only it can tell.

        Never waits on the index or the store: safe to call on the event loop.
        """
        item = self.hot.get(namespace, key)
        if item is None:
            return None
        _MEMORY_HEAD.inc()
        return item.entry

    def read_hot(
        self,
        namespace: str,
        key: str,
        *,
        if_none_match: str | None = None,
        redirect: bool = False,
        live: bool = False,
    ) -> EntryRead | None:
        """:meth:`read_entry` from memory, or ``None`` when only it can answer (an entry not read a moment
        ago, one too large to keep, a wish for a signed URL on a server that hands them out).

        Never waits on the index or the store: safe to call on the event loop. Counted as read_entry counts.
        """
        if redirect and self._signer is not None:
            return None
        item = self.hot.get(namespace, key)
        if item is None:
            return None
        entry = item.entry
        if _reader_has(entry, if_none_match):
            _MEMORY_NOT_MODIFIED.inc()
            return NotModified(entry)
        if item.content is None:
            return None
        self._access.hit(namespace, key, entry.size, live=live)
        _MEMORY_GET.inc()
        return OpenedEntry(entry=entry, body=iter((item.content,)), content=item.content)

    def read_entry(
        self,
        namespace: str,
        key: str,
        *,
        if_none_match: str | None = None,
        redirect: bool = False,
        live: bool = False,
    ) -> EntryRead:
        """Read an entry, looking its row up once.

        :class:`NotModified` when ``if_none_match`` names its digest (or is ``*``), not counted; with
        ``redirect`` on a server that signs URLs, a :class:`SignedEntry` (a hit); otherwise the
        :class:`OpenedEntry` to stream (a hit). :class:`EntryNotFound` on a miss (counted). ``live``: the
        reader is a job following the namespace (counted as a live delivery too).
        """
        check_namespace(namespace)
        check_key(key)
        stamp = self.hot.stamp()
        entry = self._entries.get_entry(namespace, key)
        if entry is None:
            if if_none_match is None:  # a revalidation is not a lookup: not counted, as before
                self._access.miss(namespace)
            raise _not_found(namespace, key)
        if _reader_has(entry, if_none_match):
            self.hot.put(entry, None, stamp)
            return NotModified(entry)
        if redirect and self._signer is not None and (signed := self._signer.sign(entry)) is not None:
            self._access.hit(namespace, key, entry.size, live=live)
            return signed
        reader = open_sized(
            self._store, blob_name(namespace, key), entry.size, WHOLE_READ_BYTES, whole=self._whole
        )
        if reader is None:
            self._access.miss(namespace)
            log.warning("index row without blob: %s/%s (gc will drop it)", namespace, key)
            raise _not_found(namespace, key)
        if entry.size > WHOLE_READ_BYTES:
            self._access.hit(namespace, key, entry.size, live=live)
            self.hot.put(entry, None, stamp)
            return OpenedEntry(entry=entry, body=self._verified(entry, reader))
        try:
            content = b"".join(self._verified(entry, reader))
        except CorruptBlob:
            self._access.miss(namespace)
            raise _not_found(namespace, key) from None
        self._access.hit(namespace, key, entry.size, live=live)
        self.hot.put(entry, content, stamp)
        return OpenedEntry(entry=entry, body=iter((content,)), content=content)

    def _drop_corrupt(self, entry: EntryInfo | EntryRef) -> None:
        """Remove an entry whose stored bytes no longer match its digest (row first, then blob), so that the
        next upload of it stores it afresh instead of finding the bad blob "already stored".

        Only the entry that was read: a key evicted and stored again with other bytes since the read (its
        row and blob carry the new digest) is left alone.
        """
        name = blob_name(entry.namespace, entry.key)
        try:
            if self._entries.delete_entry(entry.namespace, entry.key, sha256=entry.sha256) is None:
                return
            self.hot.forget([(entry.namespace, entry.key)])
            info = self._store.stat(name)
            if info is not None and info.metadata.get("sha256") == entry.sha256:
                self._store.delete(name)
            log.error(
                "dropped corrupt entry %s/%s; its next upload stores it again", entry.namespace, entry.key
            )
        except Exception:  # the read already failed; a failed clean-up must not hide that
            log.exception("could not drop corrupt entry %s/%s", entry.namespace, entry.key)

    def _verified(self, entry: EntryInfo | EntryRef, reader: BlobReader) -> Iterator[bytes]:
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
            if self._verified_files.trusted(identity):
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
            self._verified_files.add(identity)
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
        log.error("corrupt blob %s/%s: stored bytes do not match the index", entry.namespace, entry.key)
        self._drop_corrupt(entry)
        raise CorruptBlob(f"stored bytes of {entry.namespace}/{entry.key} do not match the index")

    def delete_entry(self, namespace: str, key: str) -> None:
        """Remove an entry: index row first, then the blob."""
        check_namespace(namespace)
        check_key(key)
        if self._entries.delete_entry(namespace, key) is None:
            raise _not_found(namespace, key)
        self.hot.forget([(namespace, key)])
        self._store.delete(blob_name(namespace, key))

    # -- many entries -----------------------------------------------------------------------------------
    def _check_keys(self, keys: Sequence[str]) -> list[str]:
        """The keys, checked and without duplicates, within the per-request limit."""
        limit = self._settings.max_keys_per_request
        if len(keys) > limit:
            raise TooManyKeys(
                f"The request names {len(keys)} keys; at most {limit} are allowed in one request."
            )
        return list(dict.fromkeys(check_key(key) for key in keys))

    def missing(self, namespace: str, keys: Sequence[str]) -> list[str]:
        """Which of ``keys`` the namespace lacks."""
        check_namespace(namespace)
        return self._entries.missing_keys(namespace, self._check_keys(keys))

    def manifest(
        self, namespace: str, *, max_bytes: int | None = None, max_entries: int | None = None
    ) -> list[EntryRef]:
        """The entries worth warming, most useful first, within the bounds."""
        return self._entries.manifest(
            check_namespace(namespace), max_bytes=max_bytes, max_entries=max_entries
        )

    def bundle(self, namespace: str, keys: Sequence[str]) -> Iterator[bytes]:
        """A tar stream of the stored entries among ``keys`` (member name = key); absent keys are left out.

        Checks run before the first byte; each member's bytes are verified while they stream.
        """
        check_namespace(namespace)
        wanted = self._check_keys(keys)
        rows = self._entries.get_entries(namespace, wanted)
        missing = len(wanted) - len(rows)
        if missing:
            self._access.miss(namespace, missing)
        return coalesce(self._tar_stream(namespace, [rows[key] for key in wanted if key in rows]))

    def _tar_stream(self, namespace: str, entries: list[EntryRef]) -> Iterator[bytes]:
        """The members: first those with a usable copy in a pack (:mod:`cache_server.packs`), in pack order,
        then the others in order, the next small ones read meanwhile on a remote store. Each member sent is
        a hit, counted when the stream ends or breaks."""
        served: list[tuple[str, int]] = []
        try:
            yield from self._members(entries, served)
        finally:
            self._access.hits(namespace, served)

    def _members(self, entries: list[EntryRef], served: list[tuple[str, int]]) -> Iterator[bytes]:
        if self._packs is not None:
            rest: list[EntryRef] = []
            for entry, copy in read_copies(self._packs, entries, self._entries.forget_packs):
                if copy is None:
                    rest.append(entry)
                else:
                    yield from self._member(entry, (copy,), served)
            entries = rest
        readers = open_many(self._store, [(blob_name(e.namespace, e.key), e.size) for e in entries])
        for entry, reader in zip(entries, readers, strict=True):
            if reader is None:
                log.warning(
                    "index row without blob: %s/%s (left out of the bundle)", entry.namespace, entry.key
                )
                continue
            yield from self._member(entry, self._verified(entry, reader), served)
        yield END

    @staticmethod
    def _member(entry: EntryRef, body: Iterable[bytes], served: list[tuple[str, int]]) -> Iterator[bytes]:
        """One member of a bundle (added to ``served``): tar header, SHA-256 as a PAX record, its bytes."""
        served.append((entry.key, entry.size))
        yield member_header(
            entry.key, entry.size, int(entry.created_at.timestamp()), {BUNDLE_SHA256_PAX: entry.sha256}
        )
        yield from body
        if entry.size % BLOCK:
            yield padding(entry.size)

    def sign_entries(self, namespace: str, keys: Sequence[str]) -> SignedUrls:
        """Signed URLs for the stored entries among ``keys`` (each a hit; each absent key a miss).

        Raises :class:`SignedUrlsUnavailable` when this server does not hand out signed URLs.
        """
        check_namespace(namespace)
        wanted = self._check_keys(keys)
        if self._signer is None:
            raise SignedUrlsUnavailable(
                "This server does not hand out signed URLs (XLA_CACHE_SIGNED_URL_SECONDS is 0, or its "
                "storage is not Google Cloud Storage); download the entries with POST .../bundle instead."
            )
        rows = self._entries.get_entries(namespace, wanted)
        signed = self._signer.sign_all([rows[key] for key in wanted if key in rows])
        if signed is None:
            raise SignedUrlsUnavailable(
                "This server's storage credentials cannot sign URLs (they need a service-account key, or a "
                "service account allowed to sign through IAM); download the entries with POST .../bundle."
            )
        for item in signed:
            self._access.hit(namespace, item.key, item.size)
        missing = [key for key in wanted if key not in rows]
        if missing:
            self._access.miss(namespace, len(missing))
        return SignedUrls(expires_in=self._signer.seconds, entries=signed, missing=missing)
