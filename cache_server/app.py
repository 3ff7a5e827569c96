"""The application factory. Nothing is built at import time: :func:`create_app` builds everything."""

from __future__ import annotations

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

__all__ = ["create_app", "create_app_from_env"]


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
    """Factory for ``uvicorn --factory`` (used with several workers): settings from ``XLA_CACHE_*``."""
    return create_app(Settings())
