"""The application factory. Nothing is built at import time: :func:`create_app` builds everything."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from cache_server.admin import AdminService
from cache_server.api import router
from cache_server.api.auth import authorize
from cache_server.api.errors import install_error_handlers
from cache_server.api.middleware import RejectEncodedSeparators
from cache_server.api.telemetry import Telemetry, configure_access_log
from cache_server.index.db import make_engine, make_sessionmaker
from cache_server.index.repository import IndexRepository
from cache_server.service import CacheService
from cache_server.settings import Settings
from cache_server.storage import open_store

__all__ = ["build_service", "create_app", "create_app_from_env"]


def build_service(settings: Settings) -> CacheService:
    """The service over the index and blob store the settings name."""
    engine = make_engine(settings)
    repository = IndexRepository(engine, make_sessionmaker(engine))
    store = open_store(
        settings.resolved_storage_url, timeout=settings.storage_timeout, retries=settings.storage_retries
    )
    return CacheService(settings, repository, store)


def create_app(settings: Settings | None = None, service: CacheService | None = None) -> FastAPI:
    """Build the FastAPI app for ``settings`` (read from the environment when not given)."""
    settings = settings or Settings()
    service = service or build_service(settings)
    admin = AdminService(settings, service)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        admin.start()
        try:
            yield
        finally:
            admin.stop()
            service.stop()

    app = FastAPI(
        title="XLA compilation cache",
        version="1",
        description="Shared, managed persistent compilation cache for PyTorch/XLA jobs.",
        lifespan=lifespan,
        dependencies=[Depends(authorize)],  # the role each route needs: cache_server.api.auth
    )
    app.state.settings = settings
    app.state.service = service
    app.state.admin = admin
    install_error_handlers(app)
    app.include_router(router)
    app.add_middleware(RejectEncodedSeparators)
    app.add_middleware(Telemetry)  # outermost: every request is counted and logged
    configure_access_log()
    logging.getLogger("cache_server").setLevel(settings.log_level.upper())
    return app


def create_app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory`` (used with several workers): settings from ``XLA_CACHE_*``."""
    return create_app(Settings())
