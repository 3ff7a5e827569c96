"""Dependencies shared by the routes: the settings, the services and the app state ``create_app`` built."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

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
    "GraphsDep",
    "NearestDep",
    "QuotasDep",
    "RunsDep",
    "ServiceDep",
    "SettingsDep",
    "TokensDep",
    "get_admin",
    "get_feed_watcher",
    "get_graphs",
    "get_nearest",
    "get_runs",
    "get_service",
    "get_settings",
    "get_tokens",
    "get_upload_slots",
]


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def get_service(request: Request) -> CacheService:
    return _services(request).cache


def get_nearest(request: Request) -> NearestNamespaces:
    return _services(request).nearest


def get_admin(request: Request) -> AdminService:
    return _services(request).admin


def get_tokens(request: Request) -> TokenManager:
    return _services(request).tokens


def get_quotas(request: Request) -> Quotas:
    return _services(request).quotas


def get_runs(request: Request) -> RunService:
    return _services(request).runs


def get_graphs(request: Request) -> GraphReports:
    return _services(request).graphs


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


# The dependencies themselves are coroutines: FastAPI runs a plain function dependency on a worker thread,
# a hop that costs more than looking an attribute up.
async def _service(request: Request) -> CacheService:
    return get_service(request)


async def _admin(request: Request) -> AdminService:
    return get_admin(request)


async def _nearest(request: Request) -> NearestNamespaces:
    return get_nearest(request)


async def _tokens(request: Request) -> TokenManager:
    return get_tokens(request)


async def _settings(request: Request) -> Settings:
    return get_settings(request)


async def _graphs(request: Request) -> GraphReports:
    return get_graphs(request)


async def _quotas(request: Request) -> Quotas:
    return get_quotas(request)


async def _runs(request: Request) -> RunService:
    return get_runs(request)


ServiceDep = Annotated[CacheService, Depends(_service)]
AdminDep = Annotated[AdminService, Depends(_admin)]
NearestDep = Annotated[NearestNamespaces, Depends(_nearest)]
TokensDep = Annotated[TokenManager, Depends(_tokens)]
SettingsDep = Annotated[Settings, Depends(_settings)]
QuotasDep = Annotated[Quotas, Depends(_quotas)]
RunsDep = Annotated[RunService, Depends(_runs)]
GraphsDep = Annotated[GraphReports, Depends(_graphs)]
