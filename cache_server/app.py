"""The application factory. Nothing is built at import time: :func:`create_app` builds everything."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from cache_server.api import router
from cache_server.api.auth import authorize
from cache_server.api.bodies import UploadSlots
from cache_server.api.errors import install_error_handlers
from cache_server.api.middleware import BoundedBodies, RejectEncodedSeparators
from cache_server.api.telemetry import Telemetry, configure_access_log
from cache_server.service.feed import FeedWatcher
from cache_server.settings import Settings
from cache_server.wiring import Services, build_services

__all__ = ["GC_THRESHOLDS", "create_app", "create_app_from_env", "settle_heap"]

GC_THRESHOLDS = (20_000, 20, 20)
"""The garbage collector's thresholds in a server process (Python's are 700, 10, 10): young collections a
thirtieth as often, so a request that builds a few hundred thousand objects (a run's detail compares graph
bodies) triggers a handful of collections, not hundreds; each held the GIL, and the event loop with it."""


def create_app(settings: Settings | None = None, services: Services | None = None) -> FastAPI:
    """Build the FastAPI app for ``settings`` (read from the environment when not given).

    ``services`` are built from the settings unless given (tests build their own, to look inside); the app
    starts them when it starts and stops them when it stops.
    """
    settings = settings or (services.settings if services is not None else Settings())
    services = services or build_services(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The app's state, built here and only here. Uploads get threads of their own, so uploads that
        # stall cannot starve the other routes; the feed's watcher runs on this event loop.
        app.state.upload_slots = UploadSlots(settings.max_concurrent_uploads, settings.upload_wait_seconds)
        app.state.feed_watcher = FeedWatcher(services.cache.feed_heads, services.cache.feed_head)
        services.start()
        try:
            yield
        finally:
            await app.state.feed_watcher.close()
            services.stop()

    app = FastAPI(
        title="XLA compilation cache",
        version="1",
        description="Shared, managed persistent compilation cache for PyTorch/XLA jobs.",
        lifespan=lifespan,
        dependencies=[Depends(authorize)],  # the role each route declares: cache_server.api.access
        docs_url=None,  # served by cache_server.api.docs, behind the role check
        redoc_url=None,
        openapi_url=None,
    )
    app.state.settings = settings
    app.state.services = services
    install_error_handlers(app)
    app.include_router(router)
    app.add_middleware(  # JSON bodies: at most XLA_CACHE_MAX_JSON_BYTES, no pause over the body timeout
        BoundedBodies, max_bytes=settings.max_json_bytes, idle_timeout=settings.body_timeout_seconds
    )
    app.add_middleware(RejectEncodedSeparators)
    # outermost: every request counted, logged, and known to be in flight (background parsing waits)
    app.add_middleware(Telemetry, routes=app.router.routes, activity=services.activity)
    configure_access_log()
    logging.getLogger("cache_server").setLevel(settings.log_level.upper())
    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory`` (what ``xla-cache-server serve`` runs, in each worker): settings from
    ``XLA_CACHE_*``, the heap settled once the app is built (:func:`settle_heap`)."""
    app = create_app(Settings())
    settle_heap()
    return app


def settle_heap() -> None:
    """What a server process holds once its app is built (modules, the app, its routes and schemas: hundreds
    of thousands of objects that live as long as it does) is moved out of the garbage collector's reach
    (``gc.freeze``), and young collections run less often (:data:`GC_THRESHOLDS`): a full collection no
    longer walks them each time a request's work (a run's detail, a bucketing report) allocates enough to
    trigger one. Each such collection held the GIL for 90-120 ms, and the event loop with it (/healthz
    waited that long behind two detail pages); frozen, 20-30 ms. Called once per process, after the app is
    built (the benches that time requests in process call it too, to time what a server does)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
