"""The cache service: one object over the concept modules of this package, built once in
:func:`cache_server.wiring.build_services` and handed to the routes. No HTTP here.

Each public method is one concept's own (bound when the service is built, so a call goes straight to it):

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

from cache_server.background.access import AccessRecorder
from cache_server.domain import Clock, utcnow
from cache_server.index.entries import EntryRepository
from cache_server.index.feed import FeedRepository
from cache_server.index.namespaces import NamespaceRepository
from cache_server.service.bulk import BulkUploads
from cache_server.service.bundles import Bundles
from cache_server.service.feed import Feed
from cache_server.service.hot import HotEntries
from cache_server.service.namespaces import Namespaces
from cache_server.service.packs import packing_store
from cache_server.service.quotas import Quotas
from cache_server.service.reads import Reads
from cache_server.service.signed_urls import Signing
from cache_server.service.upload_signatures import SignaturePolicy
from cache_server.service.verify import ReadChecker
from cache_server.service.writer import EntryWriter, StoredHook
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
        signing = Signing(settings, entries, store, access)
        named = Namespaces(namespaces, quotas=quotas, clock=clock)
        writer = EntryWriter(
            settings,
            entries,
            store,
            on_stored=self._stored,
            clock=clock,
            quotas=quotas,
            signatures=signatures,
        )
        packs = packing_store(store, settings.packs)
        bulk = BulkUploads(writer, packs)
        reads = Reads(entries, store, access=access, hot=self.hot, verifier=self._verifier, signing=signing)
        bundles = Bundles(
            entries, store, settings=settings, access=access, verifier=self._verifier, packs=packs
        )
        changes = Feed(feed)

        self.register_namespace = named.register
        self.get_namespace = named.get
        self.put_entry = writer.put_entry
        self.put_entries = bulk.put_entries
        self.head_hot = reads.head_hot
        self.head_entry = reads.head_entry
        self.read_hot = reads.read_hot
        self.read_entry = reads.read_entry
        self.delete_entry = reads.delete_entry
        self.missing = bundles.missing
        self.manifest = bundles.manifest
        self.bundle = bundles.bundle
        self.sign_entries = signing.sign_entries
        self.feed_head = changes.head
        self.feed_heads = changes.heads
        self.feed = changes.rows

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
