"""Dependencies shared by the routes: the settings, the services and the app state ``create_app`` built."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request

from cache_server.admin.eviction import Evictor
from cache_server.admin.service import AdminService
from cache_server.api.bodies import UploadSlots
from cache_server.auth.tokens import TokenManager
from cache_server.graphs.report import GraphReports
from cache_server.runs.ingest import RunService
from cache_server.service import CacheService
from cache_server.service.feed import FeedWatcher
from cache_server.service.nearest import NearestNamespaces
from cache_server.service.quotas import Quotas
from cache_server.settings import Settings
from cache_server.wiring import Services

__all__ = [
    "AdminDep",
    "EvictorDep",
    "GraphsDep",
    "NearestDep",
    "QuotasDep",
    "RunsDep",
    "ServiceDep",
    "SettingsDep",
    "TokensDep",
    "get_feed_watcher",
    "get_service",
    "get_settings",
    "get_tokens",
    "get_upload_slots",
    "service",
]


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def get_service(request: Request) -> CacheService:
    return _services(request).cache


def get_tokens(request: Request) -> TokenManager:
    return _services(request).tokens


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_upload_slots(request: Request) -> UploadSlots:
    """The upload slots the app's lifespan made (:func:`cache_server.app.create_app`)."""
    slots: UploadSlots = request.app.state.upload_slots
    return slots


def get_feed_watcher(request: Request) -> FeedWatcher:
    """The change feed's watcher the app's lifespan made (:func:`cache_server.app.create_app`)."""
    watcher: FeedWatcher = request.app.state.feed_watcher
    return watcher


def service(name: str) -> Callable[[Request], Coroutine[Any, Any, Any]]:
    """A dependency giving the app's service ``name`` (an attribute of :class:`cache_server.wiring.Services`):
    a new service takes ``Annotated[TheService, Depends(service("name"))]``, nothing else here.

    The dependency is a coroutine: FastAPI runs a plain function dependency on a worker thread, a hop that
    costs more than looking an attribute up."""

    async def dependency(request: Request) -> Any:
        return getattr(_services(request), name)

    dependency.__name__ = f"{name}_service"
    return dependency


async def _settings(request: Request) -> Settings:
    return get_settings(request)


ServiceDep = Annotated[CacheService, Depends(service("cache"))]
AdminDep = Annotated[AdminService, Depends(service("admin"))]
EvictorDep = Annotated[Evictor, Depends(service("evictor"))]
NearestDep = Annotated[NearestNamespaces, Depends(service("nearest"))]
TokensDep = Annotated[TokenManager, Depends(service("tokens"))]
SettingsDep = Annotated[Settings, Depends(_settings)]
QuotasDep = Annotated[Quotas, Depends(service("quotas"))]
RunsDep = Annotated[RunService, Depends(service("runs"))]
GraphsDep = Annotated[GraphReports, Depends(service("graphs"))]
