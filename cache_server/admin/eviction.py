"""Eviction: least recently used entries first, index rows before blobs, in batches.

Candidates stream from the index in least-recently-used order. Each batch of rows is deleted in one
transaction (``DELETE ... RETURNING``, so of several processes evicting at once each entry is removed and
counted by exactly one), then that batch's blobs are deleted by a small thread pool. A blob whose delete
fails is an orphan that gc removes later; it is never a row without a blob.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from cache_server import metrics
from cache_server.errors import BadRequest, CacheError
from cache_server.index.admin_repository import AdminRepository, EntryRef
from cache_server.index.models import utcnow
from cache_server.names import check_namespace
from cache_server.settings import Settings
from cache_server.storage.base import BlobStore, blob_name

__all__ = ["BATCH", "EvictionResult", "Evictor"]

log = logging.getLogger(__name__)
BATCH = 1000  # rows per delete transaction
BLOB_DELETERS = 8  # concurrent blob deletes (one HTTP call each on GCS)


@dataclass
class EvictionResult:
    """How many entries went (or would go, on a dry run) and how many bytes that frees.

    ``entries`` lists them, least recently used first, up to the listing limit.
    """

    evicted: int = 0
    freed_bytes: int = 0
    dry_run: bool = False
    entries: list[EntryRef] = field(default_factory=list)
    listed_all: bool = True

    def add(self, other: EvictionResult, list_limit: int) -> None:
        self.evicted += other.evicted
        self.freed_bytes += other.freed_bytes
        room = max(0, list_limit - len(self.entries))
        self.entries.extend(other.entries[:room])
        self.listed_all = self.listed_all and other.listed_all and len(other.entries) <= room


class Evictor:
    """Removes entries to keep the store within its budgets, or as an admin asks."""

    def __init__(
        self,
        settings: Settings,
        repository: AdminRepository,
        store: BlobStore,
        before: Callable[[], None] = lambda: None,
    ) -> None:
        self._settings = settings
        self._repository = repository
        self._store = store
        self._before = before  # flushes pending access times, so nothing just used looks old

    def evict(
        self,
        *,
        max_total_bytes: int | None = None,
        older_than_seconds: float | None = None,
        namespace: str | None = None,
        dry_run: bool = False,
        list_limit: int = 1000,
    ) -> EvictionResult:
        """Evict entries unused for ``older_than_seconds``, then least recently used ones until the store
        (or ``namespace``) holds at most ``max_total_bytes``.

        With neither given, the configured budgets apply (``XLA_CACHE_MAX_TOTAL_BYTES`` and
        ``XLA_CACHE_MAX_NAMESPACE_BYTES``).
        """
        if namespace is not None:
            check_namespace(namespace)
        if max_total_bytes is None and older_than_seconds is None:
            return self.enforce_budgets(namespace=namespace, dry_run=dry_run, list_limit=list_limit)
        if max_total_bytes is not None and max_total_bytes < 0:
            raise BadRequest("max_total_bytes must not be negative.")
        if older_than_seconds is not None and older_than_seconds < 0:
            raise BadRequest("older_than_seconds must not be negative.")
        self._before()
        cutoff = (
            utcnow() - dt.timedelta(seconds=older_than_seconds) if older_than_seconds is not None else None
        )
        excess = 0
        if max_total_bytes is not None:
            stored = self._repository.stored_by_namespace()
            held = stored.get(namespace, (0, 0))[1] if namespace else sum(b for _, b in stored.values())
            excess = held - max_total_bytes
        return self._run(self._victims(namespace, cutoff, excess), dry_run=dry_run, list_limit=list_limit)

    def enforce_budgets(
        self, *, namespace: str | None = None, dry_run: bool = False, list_limit: int = 1000
    ) -> EvictionResult:
        """Apply the configured budgets: each namespace under its limit, then the whole store."""
        per_namespace = self._settings.max_namespace_bytes
        total = self._settings.max_total_bytes
        if per_namespace is None and total is None:
            raise BadRequest(
                "Say what to evict (max_total_bytes or older_than_seconds), or configure "
                "XLA_CACHE_MAX_TOTAL_BYTES or XLA_CACHE_MAX_NAMESPACE_BYTES."
            )
        result = EvictionResult(dry_run=dry_run)
        if per_namespace is not None:
            for name, (_, held) in sorted(self._repository.stored_by_namespace().items()):
                if held > per_namespace and namespace in (None, name):
                    part = self.evict(
                        max_total_bytes=per_namespace, namespace=name, dry_run=dry_run, list_limit=list_limit
                    )
                    result.add(part, list_limit)
        if total is not None and namespace is None:
            result.add(self.evict(max_total_bytes=total, dry_run=dry_run, list_limit=list_limit), list_limit)
        return result

    def delete_namespace(self, namespace: str) -> EvictionResult:
        """Remove a namespace: its entries (rows, then blobs, in batches) and then its row."""
        check_namespace(namespace)
        result = EvictionResult()
        while page := self._repository.keys_page(namespace, after=None, limit=BATCH):
            removed = self._remove([(namespace, key) for key, _ in page], evicted=False)
            result.evicted += len(removed)
            result.freed_bytes += sum(size for _, _, size in removed)
        self._repository.drop_namespace_row(namespace)
        return result

    # -- internals --------------------------------------------------------------------------------------
    def _victims(self, namespace: str | None, cutoff: dt.datetime | None, excess: int) -> Iterable[EntryRef]:
        """Least recently used entries while they are older than the cutoff or bytes are still over."""
        for ref in self._repository.iter_lru(namespace=namespace):
            if (cutoff is not None and ref.last_access_at < cutoff) or excess > 0:
                excess -= ref.size
                yield ref
            else:
                return  # in LRU order: nothing after this one is older or needed

    def _run(self, victims: Iterable[EntryRef], *, dry_run: bool, list_limit: int) -> EvictionResult:
        result = EvictionResult(dry_run=dry_run)
        batch: list[EntryRef] = []

        def flush() -> None:
            if dry_run:
                result.evicted += len(batch)
                result.freed_bytes += sum(ref.size for ref in batch)
            else:
                removed = self._remove([(ref.namespace, ref.key) for ref in batch], evicted=True)
                result.evicted += len(removed)
                result.freed_bytes += sum(size for _, _, size in removed)
            batch.clear()

        for ref in victims:
            if len(result.entries) < list_limit:
                result.entries.append(ref)
            else:
                result.listed_all = False
            batch.append(ref)
            if len(batch) >= BATCH:
                flush()
        flush()
        return result

    def _remove(self, refs: Sequence[tuple[str, str]], *, evicted: bool) -> list[tuple[str, str, int]]:
        """Rows first (one transaction), then the blobs of the rows this call really deleted."""
        if not refs:
            return []
        removed = self._repository.delete_entries(refs, evicted=evicted)
        with ThreadPoolExecutor(BLOB_DELETERS, thread_name_prefix="xla-cache-evict") as pool:
            failures = sum(not ok for ok in pool.map(self._delete_blob, removed))
        if failures:
            log.warning("%d blobs could not be deleted; gc will remove them", failures)
        if evicted:
            counts: Counter[str] = Counter()
            sizes: Counter[str] = Counter()
            for namespace, _, size in removed:
                counts[namespace] += 1
                sizes[namespace] += size
            for namespace in counts:
                metrics.EVICTIONS.labels(namespace).inc(counts[namespace])
                metrics.EVICTED_BYTES.labels(namespace).inc(sizes[namespace])
        return removed

    def _delete_blob(self, item: tuple[str, str, int]) -> bool:
        namespace, key, _ = item
        try:
            self._store.delete(blob_name(namespace, key))
        except CacheError as exc:
            log.warning("could not delete blob %s/%s: %s", namespace, key, exc.detail)
            return False
        return True
