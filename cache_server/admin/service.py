"""The admin side as one object: stats, eviction (on request and in the background), gc, tokens, graphs."""

from __future__ import annotations

import logging
import threading

from cache_server.admin.eviction import EvictionResult, Evictor
from cache_server.admin.gc import DEFAULT_GRACE_SECONDS, GcResult, collect_garbage
from cache_server.admin.graphs import GraphIndexer
from cache_server.admin.stats import StatsReport, build_report
from cache_server.auth import TokenManager
from cache_server.errors import CacheError, NamespaceNotFound
from cache_server.index.admin_repository import AdminRepository
from cache_server.index.db import make_sessionmaker
from cache_server.index.token_repository import TokenRepository
from cache_server.names import check_namespace
from cache_server.service import CacheService
from cache_server.settings import Settings

__all__ = ["AdminService"]

log = logging.getLogger(__name__)


class AdminService:
    """Operations on the whole cache, over the same index and blob store as the :class:`CacheService`.

    Eviction on request is ``evictor.evict(...)``; see :class:`~cache_server.admin.eviction.Evictor`.
    """

    def __init__(self, settings: Settings, service: CacheService) -> None:
        engine = service.repository.engine
        self.settings = settings
        self.service = service
        self.repository = AdminRepository(engine, make_sessionmaker(engine))
        self.tokens = TokenManager(TokenRepository(engine, make_sessionmaker(engine)))
        self.graphs = GraphIndexer(self.repository, service.store)
        self.evictor = Evictor(settings, self.repository, service.store, before=service.access.flush)
        service.stored_listeners.append(self.graphs.notify)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start parsing entries, and background eviction when a budget is configured."""
        self.graphs.start()
        budgets = (self.settings.max_total_bytes, self.settings.max_namespace_bytes)
        if self._thread is None and any(b is not None for b in budgets):
            self._stop.clear()
            self._thread = threading.Thread(target=self._evict_loop, name="xla-cache-evict", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.graphs.stop()

    def _evict_loop(self) -> None:
        while not self._stop.wait(self.settings.eviction_interval_seconds):
            try:
                result = self.evictor.enforce_budgets()
            except CacheError as exc:
                log.warning("background eviction skipped: %s", exc.detail)
                continue
            except Exception:
                log.exception("background eviction failed")
                continue
            if result.evicted:
                log.info(
                    "evicted %d entries (%d bytes) to stay within budget", result.evicted, result.freed_bytes
                )

    # -- operations -------------------------------------------------------------------------------------
    def stats(self, *, days: int = 30, top: int = 10, namespace: str | None = None) -> StatsReport:
        """Totals, per namespace, per day and top graphs; this process's pending counts are written first."""
        if namespace is not None:
            check_namespace(namespace)
        self.service.access.flush()
        return build_report(self.repository, days=days, top=top, namespace=namespace)

    def gc(self, *, grace_seconds: float = DEFAULT_GRACE_SECONDS, dry_run: bool = False) -> GcResult:
        """Reconcile the store and the index (see :mod:`cache_server.admin.gc`)."""
        return collect_garbage(
            self.repository, self.service.store, grace_seconds=grace_seconds, dry_run=dry_run
        )

    def delete_namespace(self, namespace: str) -> EvictionResult:
        """Remove a namespace with all its entries; :class:`NamespaceNotFound` if it does not exist."""
        if self.repository.get_namespace(check_namespace(namespace)) is None:
            raise NamespaceNotFound(f"The namespace {namespace!r} does not exist.")
        return self.evictor.delete_namespace(namespace)
