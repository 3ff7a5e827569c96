"""A server app in process for tests: a ``TestClient`` over a fresh embedded index and store, and the
services behind one (to look at the index and the store directly)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from cache_server.app import create_app
from cache_server.index import EntryRepository
from cache_server.index.feed import FeedRepository
from cache_server.index.namespaces import NamespaceRepository
from cache_server.service import CacheService
from cache_server.settings import Settings
from cache_server.wiring import Services
from tests.support.migrated import migrated

__all__ = ["another_cache_service", "client_for", "services_of"]


def client_for(tmp_path: Path, **settings: object) -> TestClient:
    """A client of an app whose data directory is ``tmp_path/data`` (migrated), with ``settings`` on top."""
    config = Settings(data_dir=tmp_path / "data", access_flush_seconds=60.0, **settings)  # type: ignore[arg-type]
    migrated(config)
    return TestClient(create_app(config))


def services_of(client: TestClient) -> Services:
    """The services behind a test client's app."""
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return services


def another_cache_service(settings: Settings, services: Services) -> CacheService:
    """A cache service of its own over ``services``' index, store and access counts, with no parsing
    listening (as another process storing into the same cache would be)."""
    return CacheService(
        settings,
        EntryRepository(services.database),
        services.store,
        services.access,
        namespaces=NamespaceRepository(services.database),
        feed=FeedRepository(services.database),
    )
