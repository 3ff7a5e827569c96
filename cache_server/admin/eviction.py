"""Eviction: least recently used entries first, index rows before blobs, in batches.

Candidates stream from the index in least-recently-used order. Each batch of rows is deleted in one
transaction (``DELETE ... RETURNING``, so of several processes evicting at once each entry is removed and
counted by exactly one), then that batch's blobs are deleted by a small thread pool. A blob whose delete
fails is an orphan that gc removes later; it is never a row without a blob.

A purge of a signer or of a token, and a namespace's delete, may be asked to remove at most ``max_entries``
in one call and answer how many ``remaining``: the CLI calls again until none remain, printing the progress,
and each call is a few transactions of :data:`BATCH` rows, so a server that dies midway has removed whole
batches (their tombstones with them) and the next call removes the rest; blobs whose rows went before it died
are orphans that gc removes. Each batch is logged as it goes.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from itertools import islice

from cache_server import metrics
from cache_server.domain import Clock, RemovalPolicy, utcnow
from cache_server.errors import BadRequest, CacheError
from cache_server.index.admin import AdminRepository, EvictionCandidate
from cache_server.names import check_namespace
from cache_server.settings import Settings
from cache_server.storage.base import BlobStore, blob_name

__all__ = ["BATCH", "EvictionResult", "Evictor"]

log = logging.getLogger(__name__)
BATCH = 5000  # rows per delete transaction
BLOB_DELETERS = 8  # concurrent blob deletes (one HTTP call each on GCS)
_PURGE: RemovalPolicy = "purge"
_EVICTIONS: frozenset[RemovalPolicy] = frozenset({"lru", "max_age"})  # counted as evictions


@dataclass
class EvictionResult:
    """How many entries went (or would go, on a dry run) and how many bytes that frees.

    ``entries`` lists them, least recently used first, up to the listing limit.
    """

    evicted: int = 0
    freed_bytes: int = 0
    dry_run: bool = False
    entries: list[EvictionCandidate] = field(default_factory=list)
    listed_all: bool = True
    remaining: int | None = None  # a purge (signer, token), a namespace's delete: how many are left to remove


class Evictor:
    """Removes entries to keep the store within its budgets, or as an admin asks."""

    def __init__(
        self,
        settings: Settings,
        repository: AdminRepository,
        store: BlobStore,
        before: Callable[[], None] = lambda: None,
        clock: Clock = utcnow,
        forget: Callable[[Sequence[tuple[str, str]]], None] = lambda refs: None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._repository = repository
        self._store = store
        self._before = before  # flushes pending access times, so nothing just used looks old
        self._forget = forget  # drops memory copies of removed entries (cache_server.service.hot)

    def evict(
        self,
        *,
        max_total_bytes: int | None = None,
        older_than_seconds: float | None = None,
        namespace: str | None = None,
        dry_run: bool = False,
        list_limit: int = 1000,
    ) -> EvictionResult:
        """Evict entries unused for ``older_than_seconds``, and least recently used ones until the store
        (or ``namespace``) holds at most ``max_total_bytes``.

        With neither given, the configured budgets apply (:meth:`enforce_budgets`).
        """
        if namespace is not None:
            check_namespace(namespace)
        if max_total_bytes is None and older_than_seconds is None:
            return self.enforce_budgets(namespace=namespace, dry_run=dry_run, list_limit=list_limit)
        if max_total_bytes is not None and max_total_bytes < 0:
            raise BadRequest("max_total_bytes must not be negative.")
        if older_than_seconds is not None and older_than_seconds < 0:
            raise BadRequest("older_than_seconds must not be negative.")
        cutoff = (
            self._clock() - dt.timedelta(seconds=older_than_seconds)
            if older_than_seconds is not None
            else None
        )
        if namespace is not None:  # the budget is the namespace's own
            return self._evict(namespace, None, max_total_bytes, cutoff, dry_run, list_limit)
        return self._evict(None, max_total_bytes, None, cutoff, dry_run, list_limit)

    def enforce_budgets(
        self, *, namespace: str | None = None, dry_run: bool = False, list_limit: int = 1000
    ) -> EvictionResult:
        """Bring each namespace within ``XLA_CACHE_MAX_NAMESPACE_BYTES`` (its oldest entries go), then the
        whole store within ``XLA_CACHE_MAX_TOTAL_BYTES`` (the oldest of what is left go). With ``namespace``,
        only that namespace's budget."""
        per_namespace = self._settings.max_namespace_bytes
        total = self._settings.max_total_bytes if namespace is None else None
        if per_namespace is None and total is None:
            raise BadRequest(
                "Say what to evict (max_total_bytes or older_than_seconds), or configure "
                "XLA_CACHE_MAX_TOTAL_BYTES or XLA_CACHE_MAX_NAMESPACE_BYTES."
            )
        return self._evict(namespace, total, per_namespace, None, dry_run, list_limit)

    def remove_stored_by(
        self,
        token_ids: Sequence[str],
        *,
        dry_run: bool = False,
        list_limit: int = 1000,
        max_entries: int | None = None,
    ) -> EvictionResult:
        """Remove every entry these tokens stored, or the ``max_entries`` least recently used of them; rows,
        then blobs, in batches; not counted as evictions. ``remaining``: how many they stored are left."""
        if not token_ids:
            return EvictionResult(dry_run=dry_run, remaining=0)
        return self._purge(
            self._repository.iter_stored_by(token_ids),
            lambda: self._repository.count_stored_by(token_ids),
            f"token {', '.join(token_ids)}",
            dry_run=dry_run,
            list_limit=list_limit,
            max_entries=max_entries,
        )

    def remove_signed_by(
        self,
        signer: str | None,
        *,
        dry_run: bool = False,
        list_limit: int = 1000,
        max_entries: int | None = None,
    ) -> EvictionResult:
        """Remove every entry this key id signed (None: every unsigned entry), or the ``max_entries`` least
        recently used of them; rows, then blobs, in batches; not counted as evictions. ``remaining``: how many
        it signed are left."""
        return self._purge(
            self._repository.iter_signed_by(signer),
            lambda: self._repository.count_signed_by(signer),
            "unsigned entries" if signer is None else f"entries signed by {signer}",
            dry_run=dry_run,
            list_limit=list_limit,
            max_entries=max_entries,
        )

    def delete_namespace(self, namespace: str, *, max_entries: int | None = None) -> EvictionResult:
        """Remove a namespace: its entries (rows, then blobs, in batches) and then its row; with
        ``max_entries``, at most that many entries, and its row only once none remain (``remaining``).

        Uploads may go on meanwhile: the row goes only if no entry is under it at that instant
        (:meth:`AdminRepository.drop_namespace_row`), so an entry committed after the count keeps the
        namespace and is counted in ``remaining``; one committed after the row went makes it anew."""
        check_namespace(namespace)
        result = EvictionResult()
        with _BlobDeleter(self._store) as blobs:
            while max_entries is None or result.evicted < max_entries:
                limit = BATCH if max_entries is None else min(BATCH, max_entries - result.evicted)
                page = self._repository.keys_page(namespace, after=None, limit=limit)
                if not page:
                    break
                removed = self._delete_rows([(namespace, key) for key, _ in page], "namespace_deleted")
                blobs.delete(removed)
                result.evicted += len(removed)
                result.freed_bytes += sum(size for _, _, size in removed)
                log.info("delete of namespace %s: %d entries removed so far", namespace, result.evicted)
        result.remaining = self._repository.count_in_namespace(namespace)
        if not result.remaining and not self._repository.drop_namespace_row(namespace):
            # an upload stored an entry since (or another delete dropped the row): count again
            result.remaining = self._repository.count_in_namespace(namespace)
        return result

    # -- internals --------------------------------------------------------------------------------------
    def _purge(
        self,
        stream: Generator[EvictionCandidate, None, None],
        count: Callable[[], int],
        what: str,
        *,
        dry_run: bool,
        list_limit: int,
        max_entries: int | None,
    ) -> EvictionResult:
        """Remove what ``stream`` yields (at most ``max_entries``) as a purge, then say how many ``count``
        finds left (on a dry run: how many would be left after it)."""
        with closing(stream):
            victims = ((ref, _PURGE) for ref in islice(stream, max_entries))
            result = self._run(victims, dry_run=dry_run, list_limit=list_limit, progress=f"purge of {what}")
        result.remaining = count() - (result.evicted if dry_run else 0)
        return result

    def _evict(
        self,
        only: str | None,
        total_budget: int | None,
        namespace_budget: int | None,
        cutoff: dt.datetime | None,
        dry_run: bool,
        list_limit: int,
    ) -> EvictionResult:
        self._before()
        stored = {
            name: held
            for name, (_, held) in self._repository.stored_by_namespace().items()
            if only in (None, name)
        }
        over: dict[str, int] = {}  # namespace -> bytes it must lose to meet its own budget
        if namespace_budget is not None:
            over = {name: held - namespace_budget for name, held in stored.items() if held > namespace_budget}
        # What the store must lose beyond those cuts to meet the total budget.
        excess = sum(stored.values()) - sum(over.values()) - total_budget if total_budget is not None else 0
        victims = self._victims(only, cutoff, over, excess)
        return self._run(victims, dry_run=dry_run, list_limit=list_limit)

    def _victims(
        self, only: str | None, cutoff: dt.datetime | None, over: dict[str, int], excess: int
    ) -> Iterator[tuple[EvictionCandidate, RemovalPolicy]]:
        """One pass in least-recently-used order. An entry goes if its namespace is over its budget, or the
        store is over the total budget (policy ``lru``), or it is older than the cutoff (``max_age``).
        Equivalent to cutting each namespace first and then the store, from one snapshot of what is
        stored."""
        for ref in self._repository.iter_lru(namespace=only):
            policy: RemovalPolicy = "lru"
            if over.get(ref.namespace, 0) > 0:
                over[ref.namespace] -= ref.size
                if over[ref.namespace] <= 0:
                    del over[ref.namespace]
            elif excess > 0 or (cutoff is not None and ref.last_access_at < cutoff):
                policy = "lru" if excess > 0 else "max_age"
                excess -= ref.size
            elif not over:
                return  # nothing after this one is older, and no budget is exceeded any more
            else:
                continue  # only other namespaces still have to lose bytes
            yield ref, policy

    def _run(
        self,
        victims: Iterable[tuple[EvictionCandidate, RemovalPolicy]],
        *,
        dry_run: bool,
        list_limit: int,
        progress: str | None = None,
    ) -> EvictionResult:
        """Remove the victims in batches; ``progress``: what to call this in a log line per batch."""
        result = EvictionResult(dry_run=dry_run)
        batch: list[tuple[EvictionCandidate, RemovalPolicy]] = []
        with _BlobDeleter(self._store) as blobs:

            def flush() -> None:
                if dry_run:
                    result.evicted += len(batch)
                    result.freed_bytes += sum(ref.size for ref, _ in batch)
                else:
                    removed = []
                    for policy in dict.fromkeys(policy for _, policy in batch):
                        refs = [(ref.namespace, ref.key) for ref, p in batch if p == policy]
                        removed.extend(self._delete_rows(refs, policy))
                    blobs.delete(removed)
                    result.evicted += len(removed)
                    result.freed_bytes += sum(size for _, _, size in removed)
                    if progress is not None and removed:
                        log.info("%s: %d entries removed so far", progress, result.evicted)
                batch.clear()

            for ref, policy in victims:
                if len(result.entries) < list_limit:
                    result.entries.append(ref)
                else:
                    result.listed_all = False
                batch.append((ref, policy))
                if len(batch) >= BATCH:
                    flush()
            flush()
        return result

    def _delete_rows(
        self, refs: Sequence[tuple[str, str]], policy: RemovalPolicy
    ) -> list[tuple[str, str, int]]:
        """Delete rows (one transaction, with their tombstones); returns those this call really deleted,
        whose blobs may go now. Budget and age evictions are counted as evictions."""
        if not refs:
            return []
        evicted = policy in _EVICTIONS
        removed = self._repository.delete_entries(
            refs, policy=policy, when=self._clock(), count_evictions=evicted
        )
        self._forget([(namespace, key) for namespace, key, _ in removed])
        if evicted:
            counts: Counter[str] = Counter()
            sizes: Counter[str] = Counter()
            for namespace, _, size in removed:
                counts[namespace] += 1
                sizes[namespace] += size
            for namespace in counts:
                label = namespace  # rows were evicted from it: a registered namespace, its own label
                metrics.EVICTIONS.labels(label).inc(counts[namespace])
                metrics.EVICTED_BYTES.labels(label).inc(sizes[namespace])
        return removed


class _BlobDeleter:
    """Deletes blobs of rows already deleted, in a few threads, while the next batch of rows is deleted.

    Each thread gets a slice of a batch (a task per blob would cost more than a local unlink). At most two
    batches are in flight; leaving the ``with`` block waits for all of them.
    """

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self._pool = ThreadPoolExecutor(BLOB_DELETERS, thread_name_prefix="xla-cache-evict")
        self._pending: list[Future[int]] = []
        self.failures = 0

    def delete(self, removed: Sequence[tuple[str, str, int]]) -> None:
        self._wait()  # the batch before this one
        slices = [removed[i::BLOB_DELETERS] for i in range(min(BLOB_DELETERS, len(removed)))]
        self._pending = [self._pool.submit(self._delete_all, part) for part in slices]

    def _wait(self) -> None:
        self.failures += sum(future.result() for future in self._pending)
        self._pending = []

    def _delete_all(self, items: Sequence[tuple[str, str, int]]) -> int:
        failures = 0
        for namespace, key, _ in items:
            try:
                self._store.delete(blob_name(namespace, key))
            except CacheError as exc:
                failures += 1
                log.warning("could not delete blob %s/%s: %s", namespace, key, exc.detail)
        return failures

    def __enter__(self) -> _BlobDeleter:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._wait()
        finally:
            self._pool.shutdown()
        if self.failures:
            log.warning("%d blobs could not be deleted; gc will remove them", self.failures)
