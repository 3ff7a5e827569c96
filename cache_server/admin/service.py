"""The admin side as one service: stats, eviction (on request and in the background), gc, packing later,
purges. Parsing the stored entries is a service of its own (:mod:`cache_server.parsing.service`)."""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence

from cache_server.admin.eviction import EvictionResult, Evictor
from cache_server.admin.gc import DEFAULT_GRACE_SECONDS, GcResult, collect_garbage, remove_unused_packs
from cache_server.admin.history import Pruned
from cache_server.admin.packing import LoosePacker, PackingResult
from cache_server.admin.provenance import PurgeResult, TokenUsage, purge_token, token_usage
from cache_server.admin.stats import StatsQuery, StatsReport, build_report
from cache_server.auth.tokens import TokenManager
from cache_server.background.periodic import Periodic
from cache_server.domain import Clock, utcnow
from cache_server.errors import NamespaceNotFound
from cache_server.index.admin import AdminRepository
from cache_server.index.graph_records import GraphRepository
from cache_server.names import check_namespace
from cache_server.service.packs import packing_store
from cache_server.settings import Settings
from cache_server.storage.abilities import StoresPacks
from cache_server.storage.base import BlobStore

__all__ = ["AdminService"]

log = logging.getLogger(__name__)
PACK_SWEEP_SECONDS = 600.0


class AdminService:
    """Operations on the whole cache, over the index's :class:`AdminRepository` and the blob store (and the
    parsed graphs' :class:`GraphRepository`, for the stats' top graphs).

    ``flush_access`` writes the hits and access times counted so far, so that stats and eviction see them;
    ``forget_entries`` drops this process's memory copies of entries removed
    (:mod:`cache_server.service.hot`). ``evictor`` (:class:`~cache_server.admin.eviction.Evictor`, built
    by :mod:`cache_server.wiring`, which gives it to the routes too) removes entries: the budgets' eviction
    here, eviction and purges on request through the routes.
    """

    def __init__(
        self,
        settings: Settings,
        repository: AdminRepository,
        graphs: GraphRepository,
        store: BlobStore,
        tokens: TokenManager,
        *,
        evictor: Evictor,
        flush_access: Callable[[], None] = lambda: None,
        clock: Clock = utcnow,
        forget_entries: Callable[[Sequence[tuple[str, str]]], None] = lambda refs: None,
        prune_history: Callable[[], Pruned] = lambda: Pruned(runs=0, tombstones=0),
    ) -> None:
        self._settings = settings
        self._repository = repository
        self._graphs = graphs
        self._store = store
        self._tokens = tokens
        self._flush_access = flush_access
        self._clock = clock
        self._packs_swept_at = -PACK_SWEEP_SECONDS
        self._forget_entries = forget_entries
        self._prune_history = prune_history
        self.evictor = evictor
        self._budgets = Periodic(
            "xla-cache-evict",
            "background eviction",
            settings.eviction_interval_seconds,
            self._enforce_budgets,
        )
        packs = packing_store(store, settings.packs)
        self._packer = None if packs is None else LoosePacker(repository, store)
        self._packing = Periodic(
            "xla-cache-pack",
            "packing loose entries",
            settings.pack_interval_seconds,
            self._pack_round,
            # the workers of one server, started together, should not read the same entries together
            first_delay=random.uniform(0.5, 1.5) * settings.pack_interval_seconds,
        )
        self._packing_lock = threading.Lock()  # the background rounds and POST /admin/pack take turns
        self._gc_rounds = Periodic(
            "xla-cache-gc",
            "background gc",
            settings.gc_interval_seconds,
            self._gc_round,
            # the workers of one server (and the servers sharing one store) should not all list it at once
            first_delay=random.uniform(0.5, 1.5) * settings.gc_interval_seconds,
        )

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start background eviction when a budget is configured, packing later and gc when configured."""
        if self._settings.max_total_bytes is not None or self._settings.max_namespace_bytes is not None:
            self._budgets.start()
        if self._packer is not None:
            self._packing.start()
        if self._settings.gc_interval_seconds > 0:
            self._gc_rounds.start()

    def stop(self) -> None:
        self._gc_rounds.stop()
        if self._packer is not None:
            self._packer.stop()  # ends a round (or POST /admin/pack) after its current pack
        self._packing.stop()
        self._budgets.stop()

    def _enforce_budgets(self) -> None:
        result = self.evictor.enforce_budgets()
        if result.evicted:
            log.info(
                "evicted %d entries (%d bytes) to stay within budget", result.evicted, result.freed_bytes
            )
            self._remove_emptied_packs()

    def _remove_emptied_packs(self) -> None:
        """After eviction: delete the packs no row points into any more (past gc's grace period, and at most
        once every PACK_SWEEP_SECONDS: it lists every pack)."""
        now = time.monotonic()
        if not isinstance(self._store, StoresPacks) or now - self._packs_swept_at < PACK_SWEEP_SECONDS:
            return
        self._packs_swept_at = now
        packs = GcResult()
        old_enough = utcnow() - dt.timedelta(seconds=DEFAULT_GRACE_SECONDS)  # the store's clock
        remove_unused_packs(self._repository, self._store, old_enough, packs)
        if packs.packs_removed:
            log.info("removed %d packs (%d bytes)", packs.packs_removed, packs.pack_bytes_removed)

    # -- packing later ----------------------------------------------------------------------------------
    def _pack_round(self) -> None:
        assert self._packer is not None
        with self._packing_lock:
            result = self._packer.round()
        if result.packs_written:
            log.info("packed %d loose entries into %d packs", result.entries_packed, result.packs_written)

    def pack_loose(self, max_entries: int, max_seconds: float) -> PackingResult | None:
        """Give the small entries stored without a copy in a pack one now, looking at up to ``max_entries``
        of them for about ``max_seconds`` at most (:mod:`cache_server.admin.packing`); None where this
        server writes no packs."""
        if self._packer is None:
            return None
        with self._packing_lock:
            return self._packer.run(max_entries, max_seconds)

    # -- operations -------------------------------------------------------------------------------------
    def stats(self, query: StatsQuery | None = None) -> StatsReport:
        """Totals, per namespace (a page of them), per day and top graphs, as ``query`` asks (the defaults of
        :class:`~cache_server.admin.stats.StatsQuery` without one); this process's pending counts are
        written first."""
        query = query or StatsQuery()
        if query.namespace is not None:
            check_namespace(query.namespace)
        self._flush_access()
        return build_report(self._repository, self._graphs, query, now=self._clock())

    def stored_by_namespace(self) -> dict[str, tuple[int, int]]:
        """Entries and bytes stored now, per namespace."""
        return self._repository.stored_by_namespace()

    def token_usage(self) -> list[TokenUsage]:
        """Every token with the entries and bytes it stored (see :mod:`cache_server.admin.provenance`)."""
        return token_usage(self._tokens, self._repository)

    def purge_token(
        self,
        name_or_id: str,
        *,
        revoke: bool = True,
        dry_run: bool = False,
        list_limit: int = 1000,
        max_entries: int | None = None,
    ) -> PurgeResult:
        """Revoke a token and remove everything it stored, at most ``max_entries`` in this call (see
        :func:`~.provenance.purge_token`)."""
        return purge_token(
            self._tokens,
            self.evictor,
            name_or_id,
            revoke=revoke,
            dry_run=dry_run,
            list_limit=list_limit,
            max_entries=max_entries,
        )

    def signer_usage(self) -> dict[str | None, tuple[int, int]]:
        """Entries and bytes per signer key id (None: unsigned), most bytes first."""
        usage = self._repository.stored_by_signer()
        return dict(sorted(usage.items(), key=lambda item: (-item[1][1], item[0] or "")))

    def gc(self, *, grace_seconds: float = DEFAULT_GRACE_SECONDS, dry_run: bool = False) -> GcResult:
        """Reconcile the store and the index (see :mod:`cache_server.admin.gc`)."""
        return collect_garbage(
            self._repository,
            self._store,
            grace_seconds=grace_seconds,
            dry_run=dry_run,
            forget=self._forget_entries,
        )

    def _gc_round(self) -> None:
        """Background gc (``XLA_CACHE_GC_INTERVAL_SECONDS``): orphans older than the orphan grace period."""
        result = self.gc(grace_seconds=self._settings.orphan_grace_seconds)
        self.prune_history()
        if result.orphan_blobs_removed or result.rows_dropped or result.damaged_blobs:
            log.info(
                "background gc: %d orphan blobs removed, %d rows dropped, %d damaged blobs set aside",
                result.orphan_blobs_removed,
                result.rows_dropped,
                result.damaged_blobs,
            )

    def prune_history(self) -> Pruned:
        """Remove the run reports and tombstones past their bounds (:mod:`cache_server.admin.history`);
        background gc does this each round."""
        pruned = self._prune_history()
        if pruned.runs or pruned.tombstones:
            log.info("pruned %d run reports and %d tombstones", pruned.runs, pruned.tombstones)
        return pruned

    def delete_namespace(self, namespace: str, *, max_entries: int | None = None) -> EvictionResult:
        """Remove a namespace with all its entries (at most ``max_entries`` of them in this call: its row goes
        once none remain); :class:`NamespaceNotFound` if it does not exist."""
        if not self._repository.namespace_exists(check_namespace(namespace)):
            raise NamespaceNotFound(f"The namespace {namespace!r} does not exist.")
        return self.evictor.delete_namespace(namespace, max_entries=max_entries)
