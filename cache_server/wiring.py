"""The parts of a server process, each built once and handed to the services that own them.

:func:`build_services` is the one place that knows how the parts fit: one index :class:`Database`, one
blob store, one access recorder, one token manager, one record of the requests in flight
(:class:`~cache_server.background.activity.Activity`, which background parsing waits on), and the services
over them: the cache, administration, parsing the stored entries (uploads notify it directly), runs.
``create_app`` serves them over HTTP; the command line uses them for reindex.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from cache_server.admin.eviction import Evictor
from cache_server.admin.history import prune_history
from cache_server.admin.reindex import Reindexer
from cache_server.admin.service import AdminService
from cache_server.auth.tokens import TokenManager
from cache_server.background.access import AccessRecorder
from cache_server.background.activity import Activity
from cache_server.background.slots import ServerSlots
from cache_server.domain import Clock, utcnow
from cache_server.graphs.report import GRAPH_REPORT_SLOTS, GraphReports
from cache_server.index import AdminRepository, Database, EntryRepository, GraphRepository, TokenRepository
from cache_server.index.feed import FeedRepository
from cache_server.index.graph_variants import GraphVariantsRepository
from cache_server.index.namespaces import NamespaceRepository
from cache_server.index.nearest import NearestRepository
from cache_server.index.quotas import QuotaRepository
from cache_server.metrics import NamespaceLabels
from cache_server.parsing.service import ParsingService
from cache_server.parsing.worker import ParserProcess
from cache_server.runs.budget import RunBudget
from cache_server.runs.ingest import RUN_DETAIL_SLOTS, RunService
from cache_server.service import CacheService
from cache_server.service.hot import HotEntries
from cache_server.service.nearest import NearestNamespaces
from cache_server.service.quotas import Quotas
from cache_server.settings import Settings
from cache_server.storage import BlobStore, open_store

__all__ = ["Services", "build_services"]


@dataclass
class Services:
    """What a server process runs: the services, and the shared parts whose lifetime they share."""

    settings: Settings
    database: Database
    store: BlobStore
    access: AccessRecorder
    cache: CacheService
    admin: AdminService
    evictor: Evictor
    parsing: ParsingService
    tokens: TokenManager
    reindexer: Reindexer
    activity: Activity
    quotas: Quotas
    runs: RunService
    nearest: NearestNamespaces
    graphs: GraphReports

    def start(self) -> None:
        """Start the background work: batched access counts, graph parsing, budget eviction."""
        self.access.start()
        self.parsing.start()
        self.admin.start()

    def stop(self) -> None:
        """Stop the background work, write the last counts, and release the store and the database."""
        self.admin.stop()
        self.parsing.stop()
        self.access.stop()
        self.store.close()
        self.database.dispose()


def build_services(
    settings: Settings,
    *,
    store: BlobStore | None = None,
    clock: Clock = utcnow,
    monotonic: Callable[[], float] = time.monotonic,
) -> Services:
    """Every part for ``settings`` (the blob store may be given instead, such as one with test credentials).

    ``clock`` is what the services read the time from; tests pass their own to age entries. ``monotonic``
    times the memory copies of entries read a moment ago (:mod:`cache_server.service.hot`); tests pass their
    own.
    """
    database = Database.from_settings(settings)
    graph_parser = None
    if store is None:
        store = open_store(
            settings.resolved_storage_url, timeout=settings.storage_timeout, retries=settings.storage_retries
        )
        # the same store, opened again in a child process that parses entries' graphs off the GIL
        graph_parser = ParserProcess(
            settings.resolved_storage_url,
            timeout=settings.storage_timeout,
            retries=settings.storage_retries,
            memory_mb=settings.parser_memory_mb,
        )
    entries = EntryRepository(database)
    labels = NamespaceLabels(
        AdminRepository(database).namespace_names,
        refresh_seconds=settings.metrics_label_refresh_seconds,
        monotonic=monotonic,
    )
    access = AccessRecorder(entries, settings.access_flush_seconds, clock=clock, labels=labels)
    tokens = TokenManager(TokenRepository(database), clock=clock)
    activity = Activity()
    hot = HotEntries(settings.hot_cache_bytes, settings.hot_cache_seconds, clock=monotonic)
    graphs = GraphRepository(database)
    parsing = ParsingService(graphs, store, activity=activity, parser=graph_parser)
    admin_rows = AdminRepository(database)
    evictor = Evictor(settings, admin_rows, store, before=access.flush, clock=clock, forget=hot.forget)
    admin = AdminService(
        settings,
        admin_rows,
        graphs,
        store,
        tokens,
        evictor=evictor,
        flush_access=access.flush,
        clock=clock,
        forget_entries=hot.forget,
        prune_history=lambda: prune_history(database, settings, clock()),
    )
    quotas = Quotas(QuotaRepository(database), settings.max_namespaces_per_token, clock=clock)
    namespaces = NamespaceRepository(database)
    cache = CacheService(
        settings,
        entries,
        store,
        access,
        namespaces=namespaces,
        feed=FeedRepository(database),
        on_stored=parsing.notify,
        clock=clock,
        hot=hot,
        quotas=quotas,
    )
    return Services(
        settings=settings,
        database=database,
        store=store,
        access=access,
        cache=cache,
        admin=admin,
        evictor=evictor,
        parsing=parsing,
        tokens=tokens,
        reindexer=Reindexer(entries, store),
        activity=activity,
        quotas=quotas,
        runs=RunService(
            database,
            ServerSlots(RUN_DETAIL_SLOTS, settings.run_details_at_once, settings.slots_directory),
            wait_seconds=settings.run_detail_wait_seconds,
            clock=clock,
            budget=RunBudget.of_settings(settings),
        ),
        nearest=NearestNamespaces(
            namespaces, NearestRepository(database), candidates=settings.nearest_candidates
        ),
        graphs=GraphReports(
            GraphVariantsRepository(database),
            ServerSlots(GRAPH_REPORT_SLOTS, settings.graph_reports_at_once, settings.slots_directory),
            wait_seconds=settings.graph_report_wait_seconds,
        ),
    )
