"""The cache service: one object over the concept modules of this package, built once in
:func:`cache_server.wiring.build_services` and handed to the routes. No HTTP here.

Each public method hands its call, as it came, to its concept's own: a method written out, with its
types, so that a reader (or a tool) follows a route through it into that module:

====================  ===================================================================================
namespaces            ``register_namespace``, ``get_namespace`` (:mod:`~cache_server.service.namespaces`)
uploads               ``put_entry`` (:mod:`~cache_server.service.writer`, the one
                      writer), ``put_entries`` (:mod:`~cache_server.service.bulk`, a tar stream of many)
single reads          ``head_hot``, ``head_entry``, ``read_hot``, ``read_entry``, ``delete_entry``
                      (:mod:`~cache_server.service.reads`)
many entries          ``missing``, ``manifest``, ``bundle`` (:mod:`~cache_server.service.bundles`)
signed URLs           ``sign_entries`` (:mod:`~cache_server.service.signed_urls`)
the change feed       ``feed_head``, ``feed_heads``, ``feed`` (:class:`cache_server.service.feed.Feed`)
====================  ===================================================================================

Consistency rules (DESIGN.md): the blob is written before its index row, and removed after it; a reader
never gets complete bytes whose SHA-256 does not match the index (:mod:`~cache_server.service.verify`).
The service owns what it is given: nothing else touches its repository or its store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from cache_protocol.tar import TarMember
from cache_server.auth.revocation import StillAllowed
from cache_server.background.access import AccessRecorder
from cache_server.domain import Clock, EntryInfo, EntryRef, NamespaceInfo, utcnow
from cache_server.index.entries import EntryRepository
from cache_server.index.feed import FeedEntry, FeedRepository
from cache_server.index.namespaces import NamespaceRepository
from cache_server.service.bulk import BulkResult, BulkUploads
from cache_server.service.bundles import Bundles
from cache_server.service.feed import Feed
from cache_server.service.hot import HotEntries
from cache_server.service.namespaces import Namespaces
from cache_server.service.packs import packing_store
from cache_server.service.quotas import Quotas
from cache_server.service.reads import PLAIN, EntryRead, Reads, ReadWish
from cache_server.service.signed_urls import SignedUrls, Signing
from cache_server.service.upload_signatures import SignaturePolicy
from cache_server.service.verify import ReadChecker
from cache_server.service.writer import EntryWriter, PutResult, StoredHook
from cache_server.settings import Settings
from cache_server.storage.base import BlobStore

__all__ = ["CacheService"]


class CacheService:
    """Entries and namespaces over the index's repositories (:class:`EntryRepository`, and
    :class:`NamespaceRepository` and :class:`FeedRepository` beside it) and one blob store.

    ``access`` counts hits and misses; ``on_stored`` hears of each new entry; ``clock`` gives the times
    written to the index; ``hot`` keeps what single reads found for the next ones
    (:mod:`cache_server.service.hot`; built from the settings when not given); ``quotas`` (None: none checked)
    bound what uploads store; ``signatures``: which uploads must be signed
    (:mod:`cache_server.service.upload_signatures`; from the settings when not given).
    """

    _bulk: BulkUploads

    def __init__(
        self,
        settings: Settings,
        entries: EntryRepository,
        store: BlobStore,
        access: AccessRecorder,
        *,
        namespaces: NamespaceRepository,
        feed: FeedRepository,
        on_stored: StoredHook | None = None,
        clock: Clock = utcnow,
        hot: HotEntries | None = None,
        quotas: Quotas | None = None,
        signatures: SignaturePolicy | None = None,
    ) -> None:
        self._entries = entries
        self._store = store
        self._on_stored = on_stored
        self.hot = (
            hot if hot is not None else HotEntries(settings.hot_cache_bytes, settings.hot_cache_seconds)
        )
        self._verifier = ReadChecker(entries, store, self.hot)
        self._signing = Signing(settings, entries, store, access)
        self._namespaces = Namespaces(namespaces, quotas=quotas, clock=clock)
        self._writer = EntryWriter(
            settings,
            entries,
            store,
            on_stored=self._stored,
            clock=clock,
            quotas=quotas,
            signatures=signatures,
        )
        packs = packing_store(store, settings.packs)
        self._bulk = BulkUploads(self._writer, packs)
        self._reads = Reads(
            entries, store, access=access, hot=self.hot, verifier=self._verifier, signing=self._signing
        )
        self._bundles = Bundles(
            entries, store, settings=settings, access=access, verifier=self._verifier, packs=packs
        )
        self._feed = Feed(feed)

    # namespaces (service/namespaces.py)

    def register_namespace(
        self,
        namespace: str,
        fingerprint: Mapping[str, Any],
        labels: Mapping[str, str],
        *,
        created_by: str | None = None,
    ) -> tuple[NamespaceInfo, bool]:
        """Create the namespace or replace its fingerprint and labels; returns it and whether it is new."""
        return self._namespaces.register(namespace, fingerprint, labels, created_by=created_by)

    def get_namespace(self, namespace: str) -> NamespaceInfo:
        """The namespace; :class:`NamespaceNotFound` if it was never registered."""
        return self._namespaces.get(namespace)

    # uploads (service/writer.py, the one writer; service/bulk.py, a tar stream of many)

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
        signature: str | None = None,
        stored_by: str | None = None,
        still_allowed: StillAllowed | None = None,
    ) -> PutResult:
        """Store one entry on its own (a ``PUT``): blob first (create-only), then its row."""
        return self._writer.put_entry(
            namespace,
            key,
            chunks,
            sha256=sha256,
            declared_size=declared_size,
            compile_time_ms=compile_time_ms,
            uploader=uploader,
            signature=signature,
            stored_by=stored_by,
            still_allowed=still_allowed,
        )

    def put_entries(
        self,
        namespace: str,
        members: Iterator[TarMember],
        *,
        stored_by: str | None = None,
        still_allowed: StillAllowed | None = None,
        uploader: str | None = None,
    ) -> BulkResult:
        """Store the members of one uploaded tar stream, each as a ``PUT`` of it would be (``uploader``:
        the stream's ``X-Uploader``, kept with each member)."""
        return self._bulk.put_entries(
            namespace, members, stored_by=stored_by, still_allowed=still_allowed, uploader=uploader
        )

    # single reads (service/reads.py)

    def head_hot(self, namespace: str, key: str) -> EntryInfo | None:
        """:meth:`head_entry` from memory, or ``None`` when only the index can tell (never waits)."""
        return self._reads.head_hot(namespace, key)

    def head_entry(self, namespace: str, key: str) -> EntryInfo:
        """What the index knows of an entry, without counting a hit."""
        return self._reads.head_entry(namespace, key)

    def read_hot(self, namespace: str, key: str, wish: ReadWish = PLAIN) -> EntryRead | None:
        """:meth:`read_entry` from memory, or ``None`` when only the index and the store can answer."""
        return self._reads.read_hot(namespace, key, wish)

    def read_entry(self, namespace: str, key: str, wish: ReadWish = PLAIN) -> EntryRead:
        """Read an entry, looking its row up once (a hit, a miss, or not modified)."""
        return self._reads.read_entry(namespace, key, wish)

    def delete_entry(self, namespace: str, key: str) -> None:
        """Remove an entry: index row first, then the blob."""
        self._reads.delete_entry(namespace, key)

    # many entries (service/bundles.py)

    def missing(self, namespace: str, keys: Sequence[str]) -> list[str]:
        """Which of ``keys`` the namespace lacks."""
        return self._bundles.missing(namespace, keys)

    def manifest(
        self, namespace: str, *, max_bytes: int | None = None, max_entries: int | None = None
    ) -> list[EntryRef]:
        """The entries worth warming, most useful first, within the bounds."""
        return self._bundles.manifest(namespace, max_bytes=max_bytes, max_entries=max_entries)

    def bundle(self, namespace: str, keys: Sequence[str]) -> Iterator[bytes]:
        """A tar stream of the stored entries among ``keys``, each member verified while it streams."""
        return self._bundles.bundle(namespace, keys)

    # signed URLs (service/signed_urls.py)

    def sign_entries(self, namespace: str, keys: Sequence[str]) -> SignedUrls:
        """Signed URLs for the stored entries among ``keys`` (:class:`SignedUrlsUnavailable` if none are)."""
        return self._signing.sign_entries(namespace, keys)

    # the change feed (service/feed.py)

    def feed_head(self) -> int:
        """The feed's newest position: where a new follower starts."""
        return self._feed.head()

    def feed_heads(self, after: int) -> dict[str, int]:
        """The namespaces whose feed grew after ``after``, with their newest position."""
        return self._feed.heads(after)

    def feed(self, namespace: str, after: int, limit: int) -> list[FeedEntry]:
        """The namespace's entries stored after position ``after``, oldest first."""
        return self._feed.rows(namespace, after, limit)

    # the service itself

    def check_ready(self) -> None:
        """Raise IndexUnavailable or StorageUnavailable unless both are reachable."""
        self._entries.ping()
        self._store.check()

    def _stored(self, namespace: str, key: str) -> None:
        """A new entry was stored: drop a memory copy of what the key held before (another process may have
        removed it meanwhile), then tell ``on_stored``."""
        self.hot.stored(namespace, key)
        if self._on_stored is not None:
            self._on_stored(namespace, key)
